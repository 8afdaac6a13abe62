package readme_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notLibrary are modules only the command and the developers' tools use
// (they live in cmd/go.mod, docs/modules.md): a user's module that imports
// the library must not have them in its module graph (issue 45). Each is a
// module path, or a prefix of several when it ends in "/".
var notLibrary = []string{
	"github.com/spf13/cobra",                 // the command's flags
	"github.com/chromedp/",                   // the outbox page's browser tests
	"github.com/compose-spec/compose-go",     // the docker-compose.yml check
	"github.com/schollz/progressbar",         // sendonce demo
	"riverqueue.com/riverui",                 // sendonce work's /riverui
	"github.com/prometheus/client_golang",    // sendonce work's /metrics
	"go.opentelemetry.io/contrib/exporters/", // sendonce work's OTLP and console exporters
}

// TestLibraryModule builds a user's module that imports outbox and worker
// alone, as TestQuickStart builds its own (a replace directive to this
// checkout, outside the workspace), and checks that neither its go.mod nor
// its module graph (go list -m all) holds a module of the command's.
func TestLibraryModule(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	main := `package main

import (
	_ "github.com/sendonce/sendonce/outbox"
	_ "github.com/sendonce/sendonce/worker"
)

func main() {}
`
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	goCmd(t, ctx, mod, env, "mod", "init", "example.com/library")
	goCmd(t, ctx, mod, env, "mod", "edit", "-require", "github.com/sendonce/sendonce@v0.0.0", "-replace", "github.com/sendonce/sendonce="+repo)
	goCmd(t, ctx, mod, env, "mod", "tidy")
	goCmd(t, ctx, mod, env, "build", "-o", filepath.Join(mod, "library"), ".")

	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	all := goCmd(t, ctx, mod, env, "list", "-m", "all")
	for _, m := range notLibrary {
		if strings.Contains(string(gomod), m) {
			t.Errorf("a module importing outbox and worker requires %s in its go.mod:\n%s", m, gomod)
		}
		for line := range strings.Lines(all) {
			if strings.HasPrefix(line, m) {
				t.Errorf("a module importing outbox and worker has %s in its module graph", strings.TrimSpace(line))
			}
		}
	}
	graph := goCmd(t, ctx, mod, env, "mod", "graph")
	t.Logf("a module importing outbox and worker: %d modules (go list -m all), %d edges (go mod graph)",
		strings.Count(all, "\n"), strings.Count(graph, "\n"))
}
