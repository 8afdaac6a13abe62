// Package readme holds the tests that the Go of the README and the docs
// works as a reader would use it. TestQuickStart: the README's quick start,
// its Go snippets in order one main.go, is built in a module of its own (a
// user's module, with a replace directive to this repository) and run
// against an empty database and the fake API, from nothing to one email
// delivered by the embedded worker. TestDocsSnippetsCompile: every other
// ```go block, of docs/*.md and of the README beyond the quick start, is
// compiled in such a module: a block with a package clause as a package of
// its own, any other as the body of a function, by default
// func(ctx context.Context, pool *pgxpool.Pool) error, or of the one an
// HTML comment on the line just before its fence names:
//
//	<!-- go-snippet: func(ctx, shutdownCtx context.Context, pool *pgxpool.Pool) error -->
//
// A block that does not compile fails the test, its error at the
// Markdown's own line. TestLibraryModule: a module that imports outbox and
// worker alone has none of the command's dependencies (cobra, chromedp,
// compose-go, progressbar, River UI, Prometheus, the OTel exporters) in its
// module graph.
package readme
