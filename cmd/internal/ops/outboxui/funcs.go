package outboxui

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/sendonce/sendonce/outbox"
)

var funcs = template.FuncMap{
	"ts":        formatTime,
	"age":       formatAge,
	"short":     shorten,
	"intentURL": intentURL,
	"query":     query,
	"prefix":    func() string { return Prefix },
}

// formatTime shows a time in UTC to the second; "—" for none.
func formatTime(v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return "—"
		}
		t = *x
	}
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// formatAge rounds a duration for a person: 3s, 4m10s, 2h5m, 3d4h.
func formatAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "none"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		days := int(d / (24 * time.Hour))
		return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
	}
}

// shorten cuts s to n runes.
func shorten(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// query builds a list page's address from pairs of names and values,
// leaving out empty values.
func query(pairs ...any) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		val := fmt.Sprint(pairs[i+1])
		if val != "" && val != "0" {
			v.Set(fmt.Sprint(pairs[i]), val)
		}
	}
	if len(v) == 0 {
		return Prefix + "/intents"
	}
	return Prefix + "/intents?" + v.Encode()
}

// stateClass is the CSS class of a state's badge.
func stateClass(s outbox.State) string { return "st-" + string(s) }

func init() {
	funcs["stateClass"] = stateClass
}
