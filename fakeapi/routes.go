package fakeapi

import (
	"net/http"
	"net/url"
	"strings"
)

// route is one endpoint the fake implements. A pattern segment "{id}" matches
// any one non-empty path segment, which the handler reads as call.id.
type route struct {
	method  string
	pattern string
	handle  func(*Server, *call)
}

// routes lists the endpoints in match order: literal paths before the
// parameterised ones they overlap (POST /emails/batch before /emails/{id}).
var routes = []route{
	{http.MethodPost, "/emails", (*Server).sendEmail},
	{http.MethodGet, "/emails", (*Server).listEmails},
	{http.MethodPost, "/emails/batch", (*Server).sendBatch},
	{http.MethodGet, "/emails/{id}", (*Server).getEmail},
	{http.MethodPatch, "/emails/{id}", (*Server).updateEmail},
	{http.MethodPost, "/emails/{id}/cancel", (*Server).cancelEmail},
	{http.MethodPost, "/templates/{id}/send", (*Server).sendTemplate},
	{http.MethodPost, "/broadcasts", (*Server).sendBroadcast},
	{http.MethodGet, "/broadcasts", (*Server).listBroadcasts},
	{http.MethodGet, "/broadcasts/{id}", (*Server).getBroadcast},
	{http.MethodPost, "/broadcasts/{id}/cancel", (*Server).cancelBroadcast},
}

// matchRoute finds the route for method and the escaped path. A path no
// route has is 404; a path some route has, under another method, is 405.
func matchRoute(method, escapedPath string) (route, string, *apiError) {
	pathMatched := false
	for _, rt := range routes {
		id, ok := matchPattern(rt.pattern, escapedPath)
		if !ok {
			continue
		}
		if rt.method == method {
			return rt, id, nil
		}
		pathMatched = true
	}
	if pathMatched {
		return route{}, "", newError(http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed",
			method+" is not allowed on "+escapedPath+".")
	}
	return route{}, "", notFound("No endpoint " + method + " " + escapedPath + " (the fake implements sends, emails and broadcasts only).")
}

// allowedMethods lists the methods some route accepts on the path, for Allow.
func allowedMethods(escapedPath string) []string {
	var methods []string
	for _, rt := range routes {
		if _, ok := matchPattern(rt.pattern, escapedPath); ok {
			methods = append(methods, rt.method)
		}
	}
	return methods
}

// matchPattern matches an escaped path against a pattern segment by segment,
// so an id holding an escaped slash (%2F) stays one segment.
func matchPattern(pattern, escapedPath string) (string, bool) {
	want := strings.Split(pattern, "/")
	got := strings.Split(escapedPath, "/")
	if len(want) != len(got) {
		return "", false
	}
	var id string
	for i := range want {
		if want[i] != "{id}" {
			if want[i] != got[i] {
				return "", false
			}
			continue
		}
		seg, err := url.PathUnescape(got[i])
		if err != nil || seg == "" {
			return "", false
		}
		id = seg
	}
	return id, true
}
