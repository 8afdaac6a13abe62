package internal_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sendonce/sendonce/"

// layerPath is pkg's path in the layout: inside the module, with the
// command's module's cmd/internal/X standing for internal/X (the packages
// that moved there for their dependencies keep their layer).
func layerPath(pkg string) string {
	p := strings.TrimPrefix(pkg, module)
	if rest, ok := strings.CutPrefix(p, "cmd/internal/"); ok {
		return "internal/" + rest
	}
	return p
}

// rank is a production package's layer: it may import only packages of a
// lower rank, or of its own folder's rank. The public packages sit between
// the internal layers, as the doc comment of package internal draws them.
func rank(pkg string) (int, bool) {
	p := layerPath(pkg)
	switch {
	case p == "migrations", p == "client", p == "fakeapi":
		return 0, true
	case strings.HasPrefix(p, "internal/base/"):
		return 10, true
	case p == "outbox", p == "webhook":
		return 20, true
	case strings.HasPrefix(p, "internal/engine/"):
		return 30, true
	case p == "worker":
		return 40, true
	case strings.HasPrefix(p, "internal/machine/"):
		return 45, true
	case strings.HasPrefix(p, "internal/ops/"):
		return 50, true
	case strings.HasPrefix(p, "cmd/"):
		return 60, true
	}
	return 0, false
}

// TestLayers holds the layout's rule: production code imports only from
// layers below its own (or its own), and never a test kit, a check, the
// bench or a developers' command. It reads both modules of the workspace
// (go.work): the library's and the command's (cmd/).
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "../...", "../cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		from, prod := rank(p.ImportPath)
		if !prod {
			continue
		}
		seen++
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to, ok := rank(imp)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which production code may not import", p.ImportPath, imp)
			case to > from:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports run downwards only", p.ImportPath, from, imp, to)
			case to == from && from != 10 && from != 50 && !strings.HasPrefix(layerPath(imp), "internal/"):
				t.Errorf("%s imports %s of its own layer", p.ImportPath, imp)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("found %d production packages; want them all", seen)
	}
}
