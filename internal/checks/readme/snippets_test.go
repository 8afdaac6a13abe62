package readme_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// A Go block of the docs is compiled in a user's module as one of two
// things. A block that starts with a package clause is a file of its own
// package. Any other block is the body of a function, by default
//
//	func(ctx context.Context, pool *pgxpool.Pool) error
//
// and, when the line just before its fence is a marker, of the function
// the marker's signature gives:
//
//	<!-- go-snippet: func(ctx, shutdownCtx context.Context, pool *pgxpool.Pool) error -->
//
// The body may use the packages of snippetImports; the parameters give it
// what it takes from the program around it. An unmarked block that does
// not compile as the default body fails the test, as does a marker that
// is not followed by a Go block.

// defaultSignature is the function an unmarked fragment is the body of.
const defaultSignature = "func(ctx context.Context, pool *pgxpool.Pool) error"

// snippetImports are the packages a fragment may use, each with a name of
// it that keeps the import used when the fragment does not use it.
var snippetImports = [][2]string{
	{"context", "context.Background"},
	{"encoding/json", "json.Marshal"},
	{"errors", "errors.New"},
	{"fmt", "fmt.Sprint"},
	{"log", "log.Print"},
	{"log/slog", "slog.Default"},
	{"net/http", "http.NewServeMux"},
	{"os", "os.Getenv"},
	{"time", "time.Now"},
	{"github.com/jackc/pgx/v5", "pgx.BeginFunc"},
	{"github.com/jackc/pgx/v5/pgxpool", "pgxpool.New"},
	{"github.com/riverqueue/river", "river.EventKindJobCompleted"},
	{"github.com/sendonce/sendonce/client", "client.MayHaveBeenDelivered"},
	{"github.com/sendonce/sendonce/migrations", "migrations.Up"},
	{"github.com/sendonce/sendonce/outbox", "outbox.New"},
	{"github.com/sendonce/sendonce/webhook", "webhook.New"},
	{"github.com/sendonce/sendonce/worker", "worker.New"},
}

// snippet is one Go block of a Markdown file.
type snippet struct {
	file string // slash-separated, relative to the repository
	line int    // the line of its first line of code
	code string // dedented as far as its fence
	// signature is the function the block is the body of ("" for a
	// block with a package clause); marked says a marker gave it.
	signature string
	marked    bool
}

var (
	goFence    = regexp.MustCompile("^([ \t]*)```go[ \t]*$")
	closeFence = regexp.MustCompile("^[ \t]*```[ \t]*$")
	marker     = regexp.MustCompile(`^\s*<!--\s*go-snippet:\s*(.*?)\s*-->\s*$`)
	pkgClause  = regexp.MustCompile(`(?m)\A(?:\s*//[^\n]*\n|\s*\n)*\s*package\s+\w+`)
)

// goBlocks returns the ```go blocks of a Markdown text, skipping the lines
// of skip (1-based, inclusive), or an error for a marker that is not
// followed by a Go block, a marker it cannot read, or a block left open.
func goBlocks(file, text string, skip [2]int) ([]snippet, error) {
	lines := strings.Split(text, "\n")
	var out []snippet
	for i := 0; i < len(lines); i++ {
		if i+1 >= skip[0] && i+1 <= skip[1] {
			continue
		}
		if m := marker.FindStringSubmatch(lines[i]); m != nil {
			if i+1 >= len(lines) || !goFence.MatchString(lines[i+1]) {
				return nil, fmt.Errorf("%s:%d: a go-snippet marker must be the line just before a ```go fence", file, i+1)
			}
			if !strings.HasPrefix(m[1], "func(") {
				return nil, fmt.Errorf("%s:%d: go-snippet marker %q: want a signature, func(...) ...", file, i+1, m[1])
			}
			continue
		}
		m := goFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		s := snippet{file: file, line: i + 2, signature: defaultSignature}
		if i > 0 {
			if mk := marker.FindStringSubmatch(lines[i-1]); mk != nil {
				s.signature, s.marked = mk[1], true
			}
		}
		var code []string
		j := i + 1
		for ; j < len(lines) && !closeFence.MatchString(lines[j]); j++ {
			code = append(code, strings.TrimPrefix(lines[j], m[1]))
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: a ```go block that is never closed", file, i+1)
		}
		s.code = strings.Join(code, "\n") + "\n"
		if pkgClause.MatchString(s.code) {
			if s.marked {
				return nil, fmt.Errorf("%s:%d: a go-snippet marker before a block with a package clause", file, i)
			}
			s.signature = ""
		}
		out = append(out, s)
		i = j
	}
	return out, nil
}

// source is the Go file that compiles the snippet, numbered n: the block
// itself when it has a package clause, else a function of package
// snippets with the block as its body. //line comments make the compiler
// name the Markdown file and its lines.
func (s snippet) source(n int) string {
	if s.signature == "" {
		return fmt.Sprintf("//line %s:%d\n%s", s.file, s.line, s.code)
	}
	var b strings.Builder
	b.WriteString("package snippets\n\nimport (\n")
	for _, imp := range snippetImports {
		fmt.Fprintf(&b, "\t%q\n", imp[0])
	}
	b.WriteString(")\n\nvar (\n")
	for _, imp := range snippetImports {
		fmt.Fprintf(&b, "\t_ = %s\n", imp[1])
	}
	b.WriteString(")\n\n")
	if s.marked {
		fmt.Fprintf(&b, "//line %s:%d\n", s.file, s.line-2)
	}
	fmt.Fprintf(&b, "func snippet%d%s {\n", n, strings.TrimPrefix(s.signature, "func"))
	fmt.Fprintf(&b, "//line %s:%d\n%s", s.file, s.line, s.code)
	b.WriteString("\tpanic(\"the end of a snippet\")\n}\n")
	return b.String()
}

// buildSnippets writes the snippets into a user's module of their own (a
// replace directive to the repository at repo) and builds them; it
// returns the go command's output and its error.
func buildSnippets(t *testing.T, ctx context.Context, repo string, snippets []snippet) (string, error) {
	t.Helper()
	files := map[string]string{}
	for i, s := range snippets {
		name := fmt.Sprintf("snippets/s%03d.go", i)
		if s.signature == "" {
			name = fmt.Sprintf("file%03d/main.go", i)
		}
		files[name] = s.source(i)
	}
	mod := userModule(t, ctx, repo, "example.com/snippets", files)
	cmd := exec.CommandContext(ctx, "go", "build", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), userModuleEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// docsSnippets returns the Go blocks of docs/*.md and of README.md outside
// its quick start (which TestQuickStart runs).
func docsSnippets(t *testing.T, repo string) []snippet {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	start, end := sectionLines(t, string(readme), quickStart)
	all, err := goBlocks("README.md", string(readme), [2]int{start, end})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(docs)
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := goBlocks("docs/"+filepath.Base(d), string(b), [2]int{})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, blocks...)
	}
	return all
}

// TestDocsSnippetsCompile builds every Go block of docs/*.md (and of
// README.md beyond the quick start) in a user's module: a block with a
// package clause as its own package, any other as the body of the
// function its marker names, or of the default one.
func TestDocsSnippetsCompile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	snippets := docsSnippets(t, repo)
	if len(snippets) == 0 {
		t.Fatal("no Go block in docs/*.md: the docs' snippets would go untested")
	}
	if out, err := buildSnippets(t, ctx, repo, snippets); err != nil {
		t.Fatalf("a Go block of the docs does not compile (%v):\n%s\n"+
			"Fix it; or, when it is the body of a function with other parameters than\n"+
			"%s, say so on the line just before its fence:\n"+
			"<!-- go-snippet: func(ctx context.Context, ...) error -->", err, out, defaultSignature)
	}
	marked := 0
	for _, s := range snippets {
		if s.marked {
			marked++
		}
	}
	t.Logf("%d Go blocks of the docs compiled, %d of them with a go-snippet marker", len(snippets), marked)
}

// TestSnippetBlocks reads blocks of every kind: unmarked, marked, with a
// package clause, indented in a list item, and in a skipped section.
func TestSnippetBlocks(t *testing.T) {
	text := strings.Join([]string{
		"# Doc", // 1
		"```go",
		"x := 1",
		"```",
		"<!-- go-snippet: func(ctx context.Context) (err error) -->", // 5
		"```go",
		"return",
		"```",
		"- an item:",
		"", // 10
		"  ```go",
		"  // A file.",
		"  package main",
		"  ```",
		"## Skipped", // 15
		"```go",
		"skipped()",
		"```",
	}, "\n")
	got, err := goBlocks("d.md", text, [2]int{15, 18})
	if err != nil {
		t.Fatal(err)
	}
	want := []snippet{
		{file: "d.md", line: 3, code: "x := 1\n", signature: defaultSignature},
		{file: "d.md", line: 7, code: "return\n", signature: "func(ctx context.Context) (err error)", marked: true},
		{file: "d.md", line: 12, code: "// A file.\npackage main\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("goBlocks:\n%+v\nwant\n%+v", got, want)
	}

	for name, bad := range map[string]string{
		"orphan marker":   "<!-- go-snippet: func() -->\ntext\n```go\nx\n```\n",
		"not a signature": "<!-- go-snippet: skip -->\n```go\nx\n```\n",
		"never closed":    "```go\nx\n",
		"marked file":     "<!-- go-snippet: func() -->\n```go\npackage p\n```\n",
	} {
		if _, err := goBlocks("d.md", bad, [2]int{}); err == nil {
			t.Errorf("%s: goBlocks took it", name)
		}
	}
}

// TestBrokenSnippetFails: an unmarked block that does not compile as the
// default body fails the build, and the error names its Markdown line;
// the same block compiles once a marker gives it its parameters.
func TestBrokenSnippetFails(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	text := "# Broken\n\n```go\n_, err := ob.Get(ctx, \"welcome:user_17\")\nreturn err\n```\n"
	blocks, err := goBlocks("docs/broken.md", text, [2]int{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := buildSnippets(t, ctx, repo, blocks)
	if err == nil || !strings.Contains(out, "docs/broken.md:4:") || !strings.Contains(out, "undefined: ob") {
		t.Fatalf("an unmarked block using an undefined name: build %v, want an error at docs/broken.md:4:\n%s", err, out)
	}
	marked := strings.Replace(text, "```go", "<!-- go-snippet: func(ctx context.Context, ob *outbox.Outbox) error -->\n```go", 1)
	if blocks, err = goBlocks("docs/broken.md", marked, [2]int{}); err != nil {
		t.Fatal(err)
	}
	if out, err := buildSnippets(t, ctx, repo, blocks); err != nil {
		t.Fatalf("the same block, marked: %v\n%s", err, out)
	}
}
