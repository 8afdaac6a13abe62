package links_test

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/checks/links"
)

// root is the repository's root, from this package's folder.
const root = "../../.."

// markdown is the Markdown the check covers: README.md, BENCHMARKS.md and
// docs/*.md, slash-separated and relative to the root.
func markdown(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/ holds no Markdown")
	}
	files := []string{"README.md", "BENCHMARKS.md"}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	return files
}

// TestRepositoryLinks: every relative link and image of README.md,
// BENCHMARKS.md and docs/*.md leads to a file that exists, and every
// #fragment to a heading of its file.
func TestRepositoryLinks(t *testing.T) {
	files := markdown(t)
	problems, err := links.Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("a link that leads nowhere: %s", p)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		n += len(links.Extract(string(b)))
	}
	t.Logf("%d files, %d links and images, %d broken", len(files), n, len(problems))
}

// TestEveryDocIsLinked: README.md links every docs/*.md, and every other
// file of docs/ (an image) is linked from the Markdown, so no page or
// picture is left where no reader finds it.
func TestEveryDocIsLinked(t *testing.T) {
	files := markdown(t)
	targets := map[string]map[string]bool{} // linking file → files it links
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		targets[f] = map[string]bool{}
		for _, l := range links.Extract(string(b)) {
			target, _, _ := strings.Cut(l.Dest, "#")
			if target != "" {
				targets[f][path.Join(path.Dir(f), target)] = true
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := "docs/" + e.Name()
		if strings.HasSuffix(name, ".md") {
			if !targets["README.md"][name] {
				t.Errorf("README.md does not link %s", name)
			}
			continue
		}
		linked := slices.ContainsFunc(files, func(f string) bool { return targets[f][name] })
		if !linked {
			t.Errorf("no Markdown file links %s", name)
		}
	}
}

// TestCheckFindsBrokenLinks runs the check on a small tree with a link of
// every kind, good and broken, and wants exactly the broken ones.
func TestCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/pic.png", "not really a picture")
	write("main.go", "package main\n")
	write("docs/guide.md", strings.Join([]string{
		"# The guide",
		"",
		"## Rate limits — and `--api-rate`",
		"",
		"## Setup",
		"",
		"## Setup",
		"",
		"Other heading",
		"-------------",
		"",
		`<a name="kept-anchor"></a>`,
		"",
		"Back to [the top](#the-guide), [the second setup](#setup-1) and [the readme](../README.md#intro).",
		"",
	}, "\n"))
	write("README.md", strings.Join([]string{
		"# Intro",
		"",
		"[good](docs/guide.md), [good anchor](docs/guide.md#rate-limits--and---api-rate),",
		"[setext](docs/guide.md#other-heading) [html](docs/guide.md#kept-anchor) [self](#intro)",
		"![picture](docs/pic.png) [code](main.go#L1) [root](/docs/guide.md) [external](https://example.com/x.md)",
		"[mail](mailto:ops@example.com) [spaced](<docs/guide.md>) [titled](docs/guide.md \"the guide\")",
		"",
		"[missing file](docs/nope.md) and [missing anchor](docs/guide.md#nope)",
		"![missing picture](docs/missing.png)",
		"[a link that spans",
		"two lines](docs/gone.md) [no self anchor](#nope) [a Go anchor](main.go#main)",
		"[escaped](../outside.md) <img src=\"docs/none.png\"> [upper](docs/guide.md#The-Guide)",
		"",
		"`[in a code span](docs/span.md)` and ``[in a double span `x`](docs/span2.md)``",
		"",
		"```md",
		"[in a fence](docs/fence.md)",
		"```",
		"",
		"- a list item with a block",
		"",
		"  ~~~",
		"  [in an indented fence](docs/fence2.md)",
		"  ~~~",
		"",
		"[ref]: docs/ref-missing.md",
		"",
	}, "\n"))

	problems, err := links.Check(dir, []string{"README.md", "docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:8: docs/nope.md: no such file: docs/nope.md",
		"README.md:8: docs/guide.md#nope: no heading or id #nope in docs/guide.md",
		"README.md:9: docs/missing.png: no such file: docs/missing.png",
		"README.md:11: docs/gone.md: no such file: docs/gone.md",
		"README.md:11: #nope: no heading or id #nope in README.md",
		"README.md:11: main.go#main: a fragment into main.go, which is not Markdown",
		"README.md:12: ../outside.md: outside the repository",
		"README.md:12: docs/guide.md#The-Guide: no heading or id #The-Guide in docs/guide.md",
		"README.md:12: docs/none.png: no such file: docs/none.png",
		"README.md:26: docs/ref-missing.md: no such file: docs/ref-missing.md",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"The guarantee, and its limits":            "the-guarantee-and-its-limits",
		"Quick start: the library in your program": "quick-start-the-library-in-your-program",
		"Batches: many emails, one request":        "batches-many-emails-one-request",
		"Rate limits — and quotas":                 "rate-limits--and-quotas",
		"sendonce_outbox (the table)":              "sendonce_outbox-the-table",
		"C++ & Go 1.26":                            "c--go-126",
		"Straße über Ünïcode":                      "straße-über-ünïcode",
		"x² and ½":                                 "x-and-",
	} {
		if got := links.Slug(text); got != want {
			t.Errorf("Slug(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestAnchors: headings as they render (code spans, links, emphasis),
// repeated headings numbered, setext headings, HTML ids, and nothing from
// code blocks.
func TestAnchors(t *testing.T) {
	text := strings.Join([]string{
		"# Watch it: run `sendonce work` and open the page",
		"## See [the guide](guide.md) and _this_ ##",
		"## `sendonce_outbox` and __strong__ words",
		"## Setup",
		"## Setup",
		"## Setup-1",
		"Underlined",
		"==========",
		`<span id="by-id"></span>`,
		"```",
		"# not a heading",
		"```",
		"| a | b |",
		"|---|---|",
	}, "\n")
	var got []string
	for a := range links.Anchors(text) {
		got = append(got, a)
	}
	slices.Sort(got)
	want := []string{
		"by-id",
		"see-the-guide-and-this",
		"sendonce_outbox-and-strong-words",
		"setup", "setup-1", "setup-1-1",
		"underlined",
		"watch-it-run-sendonce-work-and-open-the-page",
	}
	if !slices.Equal(got, want) {
		t.Errorf("anchors %q, want %q", got, want)
	}
}
