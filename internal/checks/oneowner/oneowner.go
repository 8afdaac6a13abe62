// Package oneowner finds SQL on sendonce's and River's tables outside the
// one package that owns it (internal/base/store): a Go string literal
// that names a sendonce_* or river_* relation or function beside an SQL
// keyword.
package oneowner

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Exempt are the folders and files, slash-separated from the root, whose
// SQL is not the product's: the owner itself, the schema (migrations),
// tests and their kits, the repository's checks, the developers' commands,
// the benchmark harness, which measures River and PostgreSQL beside
// sendonce with statements of its own, and the help of `sendonce
// schedule`, whose example INSERT is the user's own plain-SQL producer.
var Exempt = []string{
	"internal/base/store",
	"migrations",
	"internal/testkit",
	"internal/checks",
	"internal/cmd",
	"integration",
	"cmd/internal/bench",
	"cmd/internal/cmd",
	"cmd/internal/checks",
	"cmd/sendonce/schedule_help.go",
}

var (
	table = regexp.MustCompile(`\b(sendonce|river)_[a-z_]+`)
	// keyword is an SQL keyword as sendonce writes them, in capitals (so
	// that "with" in a sentence is not one), or pg_notify.
	keyword = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE|WITH|LISTEN|NOTIFY|COPY|TRUNCATE|LOCK|RETURNING)\b|\bpg_notify\(`)
)

// Finding is one string literal that holds SQL on an owned table.
type Finding struct {
	Pos  string // file:line, slash-separated from the root
	Text string // the literal's first line
}

// Find walks the Go files under root (tests excluded) outside Exempt and
// returns every string literal that looks like SQL on a sendonce_* or
// river_* table.
func Find(root string) ([]Finding, error) {
	var out []Finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, e := range Exempt {
			if rel == e && !d.IsDir() {
				return nil
			}
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			for _, e := range Exempt {
				if rel == e {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if table.MatchString(s) && keyword.MatchString(s) {
				line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
				out = append(out, Finding{
					Pos:  fmt.Sprintf("%s:%d", rel, fset.Position(lit.Pos()).Line),
					Text: line,
				})
			}
			return true
		})
		return nil
	})
	return out, err
}
