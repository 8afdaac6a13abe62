package fakeapi

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// optionNames are the option names a rule may carry after its kind.
var optionNames = []string{"status", "times", "p", "to", "key", "path", "method"}

// ParseFault parses one rule, for example "drop_after;p=0.2" or
// "error_before=503:times=2:to=flaky@".
func ParseFault(rule string) (Fault, error) {
	parts := splitRule(strings.TrimSpace(rule))
	kind, value, hasValue := strings.Cut(parts[0], "=")
	f := Fault{Kind: FaultKind(strings.TrimSpace(kind))}
	value = strings.TrimSpace(value)
	if err := f.setValue(value, hasValue); err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", rule, err)
	}
	for _, opt := range parts[1:] {
		name, v, ok := strings.Cut(opt, "=")
		if !ok {
			return Fault{}, fmt.Errorf("fault %q: option %q is not name=value", rule, opt)
		}
		if err := f.setOption(strings.TrimSpace(name), strings.TrimSpace(v)); err != nil {
			return Fault{}, fmt.Errorf("fault %q: %v", rule, err)
		}
	}
	return f.normalized()
}

// setValue reads the rule's "=value" (hasValue: there was an '=') by what
// the kind's value holds. An unknown kind's value is left to normalized,
// which refuses the kind.
func (f *Fault) setValue(value string, hasValue bool) error {
	spec, known := f.Kind.spec()
	if !known {
		return nil
	}
	var err error
	switch spec.value {
	case valueStatus:
		if hasValue {
			f.Status, err = strconv.Atoi(value)
		}
	case valueHold:
		if hasValue {
			f.Hold, err = strconv.Atoi(value)
		}
	case valueDelay:
		if !hasValue {
			return fmt.Errorf("%s needs a duration, as in %s=2s", f.Kind, f.Kind)
		}
		f.Delay, err = time.ParseDuration(value)
	case valueRetryAfter:
		if !hasValue {
			return errors.New("retry_after needs a value, as in retry_after=2 or retry_after=date+5s")
		}
		f.RetryAfter = value
	case valueCode:
		if hasValue && value == "" {
			return errors.New("reject needs a code after '=', as in reject=recipient_rejected")
		}
		f.Code = value
	case valueNone:
		if hasValue {
			return fmt.Errorf("%s takes no value", f.Kind)
		}
	}
	if err != nil {
		return fmt.Errorf("bad value %q: %v", value, err)
	}
	return nil
}

func (f *Fault) setOption(name, v string) error {
	var err error
	switch name {
	case "status":
		f.Status, err = strconv.Atoi(v)
	case "times":
		f.Times, err = strconv.Atoi(v)
	case "p":
		f.P, err = strconv.ParseFloat(v, 64)
	case "to":
		f.To = v
	case "key":
		f.Key = v
	case "path":
		f.Path = v
	case "method":
		f.Method = strings.ToUpper(v)
	default:
		return fmt.Errorf("unknown option %q (options: %s)", name, strings.Join(optionNames, ", "))
	}
	if err != nil {
		return fmt.Errorf("bad %s %q", name, v)
	}
	return nil
}

// splitRule splits a rule at ';', and at ':' where an option name and '='
// follow, so colons inside values (keys such as "invoice:42") survive.
func splitRule(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ';':
		case ':':
			if !startsWithOption(s[i+1:]) {
				continue
			}
		default:
			continue
		}
		parts = append(parts, s[start:i])
		start = i + 1
	}
	return append(parts, s[start:])
}

func startsWithOption(s string) bool {
	for _, name := range optionNames {
		if strings.HasPrefix(s, name+"=") {
			return true
		}
	}
	return false
}

// ParseFaults parses rules separated by commas or newlines; empty items are
// skipped.
func ParseFaults(rules string) ([]Fault, error) {
	var out []Fault
	for _, line := range strings.FieldsFunc(rules, func(r rune) bool { return r == ',' || r == '\n' }) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f, err := ParseFault(line)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// normalized fills defaults and checks the rule.
func (f Fault) normalized() (Fault, error) {
	spec, known := f.Kind.spec()
	if !known {
		names := make([]string, len(faultKinds))
		for i, k := range faultKinds {
			names[i] = string(k.kind)
		}
		return f, fmt.Errorf("unknown fault kind %q (kinds: %s)", f.Kind, strings.Join(names, ", "))
	}
	if f.Status == 0 {
		f.Status = spec.status
	}
	switch spec.value {
	case valueRetryAfter:
		if _, err := retryAfterValue(f.RetryAfter, time.Time{}); err != nil {
			return f, err
		}
	case valueDelay:
		if f.Delay <= 0 {
			return f, fmt.Errorf("%s needs a positive delay", f.Kind)
		}
	case valueHold:
		if f.Hold == 0 {
			f.Hold = 1
		}
		if f.Hold < 0 {
			return f, fmt.Errorf("%s=%d: want a positive number of later events", f.Kind, f.Hold)
		}
	case valueCode:
		if f.Code == "" {
			f.Code = DefaultRejectCode
		}
		if !validCode(f.Code) {
			return f, fmt.Errorf("reject code %q: want letters, digits and '_', as in recipient_rejected", f.Code)
		}
	}
	if spec.value != valueHold && f.Hold != 0 {
		return f, fmt.Errorf("%s takes no hold count", f.Kind)
	}
	if spec.phase == phaseEvent && (f.Path != "" || f.Method != "") {
		return f, fmt.Errorf("%s acts on the events of an email, not on a request: path= and method= do not apply (use to= or key=)", f.Kind)
	}
	if spec.value != valueCode && f.Code != "" {
		return f, fmt.Errorf("%s takes no code", f.Kind)
	}
	switch {
	case spec.status != 0 && (f.Status < 400 || f.Status > 599):
		return f, fmt.Errorf("%s status %d is not 400 to 599", f.Kind, f.Status)
	case spec.status == 0 && f.Status != 0:
		return f, fmt.Errorf("%s takes no status", f.Kind)
	}
	if f.Times < 0 {
		return f, errors.New("times must not be negative")
	}
	if f.P < 0 || f.P > 1 {
		return f, fmt.Errorf("p=%v is not between 0 and 1", f.P)
	}
	if f.P == 1 {
		f.P = 0
	}
	if _, err := path.Match(f.Path, "/"); err != nil {
		return f, fmt.Errorf("bad path pattern %q", f.Path)
	}
	return f, nil
}

// validCode reports whether code is 1 to 64 letters, digits and '_', the
// shape of the API's error codes.
func validCode(code string) bool {
	if len(code) == 0 || len(code) > 64 {
		return false
	}
	for _, c := range code {
		if !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// String renders the rule in canonical text, which ParseFault reads back.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	spec, _ := f.Kind.spec()
	switch spec.value {
	case valueStatus:
		if f.Status != 0 {
			fmt.Fprintf(&b, "=%d", f.Status)
		}
	case valueDelay:
		b.WriteString("=" + f.Delay.String())
	case valueHold:
		if f.Hold > 1 {
			fmt.Fprintf(&b, "=%d", f.Hold)
		}
	case valueRetryAfter:
		b.WriteString("=" + f.RetryAfter)
		if f.Status != 0 {
			fmt.Fprintf(&b, ";status=%d", f.Status)
		}
	case valueCode:
		if f.Code != "" {
			b.WriteString("=" + f.Code)
		}
	}
	if f.Times != 0 {
		fmt.Fprintf(&b, ";times=%d", f.Times)
	}
	if f.P != 0 {
		b.WriteString(";p=" + strconv.FormatFloat(f.P, 'g', -1, 64))
	}
	for _, o := range []struct{ name, v string }{{"to", f.To}, {"key", f.Key}, {"path", f.Path}, {"method", f.Method}} {
		if o.v != "" {
			b.WriteString(";" + o.name + "=" + o.v)
		}
	}
	return b.String()
}

// MarshalText renders the rule as String does, so Faults encode as rule text
// in JSON.
func (f Fault) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses rule text as ParseFault does.
func (f *Fault) UnmarshalText(b []byte) error {
	parsed, err := ParseFault(string(b))
	if err != nil {
		return err
	}
	*f = parsed
	return nil
}

// checkFaults normalises a list of rules, or says which one is invalid.
func checkFaults(faults []Fault) ([]Fault, error) {
	out := make([]Fault, len(faults))
	for i, f := range faults {
		n, err := f.normalized()
		if err != nil {
			return nil, fmt.Errorf("fault %d (%s): %v", i, f.Kind, err)
		}
		out[i] = n
	}
	return out, nil
}
