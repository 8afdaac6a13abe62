// Package readme holds the test that the README's quick start works as a
// newcomer would follow it: its Go snippets, in order, are one main.go,
// built in a module of its own (a user's module, with a replace directive
// to this repository) and run against an empty database and the fake API,
// from nothing to one email delivered by the embedded worker. Beside it, the
// promise of the README's modules paragraph: a module that imports outbox
// and worker alone has none of the command's dependencies (cobra, chromedp,
// compose-go, progressbar, River UI, Prometheus, the OTel exporters) in its
// module graph.
package readme
