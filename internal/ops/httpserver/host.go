package httpserver

import (
	"net"
	"net/http"
	"strings"
)

// RequireLocalHost guards next against DNS rebinding: it lets through only
// a request whose Host names this machine by loopback (see IsLocalHost),
// and answers any other 403.
//
// Without it, a UI with no token on a loopback listener is open to any web
// page the operator visits: the page's own name (attacker.example) is
// re-pointed at 127.0.0.1, and the browser then sends the page's requests,
// with "Host: attacker.example" and a matching Origin, to the UI as if they
// came from the UI's own origin. Cross-origin protection cannot tell them
// apart; the Host can, because a browser always sends the name it
// resolved, and no outside name resolves to loopback for the UI's sake.
func RequireLocalHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsLocalHost(r.Host) {
			writeText(w, http.StatusForbidden, "forbidden: without a UI token the River UI and the outbox page answer only a request "+
				"whose Host is localhost, 127.0.0.1 (any 127.x.x.x) or [::1]; open them by one of those names, "+
				"or give sendonce work a token (SENDONCE_UI_TOKEN or --ui-token-file) to reach them by another name")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLocalHost reports whether a request's Host ("host" or "host:port")
// names this machine by loopback: "localhost" (any case), an IPv4 address
// in 127.0.0.0/8, or "[::1]". Names that merely resolve to loopback
// (localhost.attacker.example, 127.0.0.1.nip.io) do not count: they are
// what a DNS-rebinding page uses.
func IsLocalHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return false
		}
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
