// Package links checks the repository's Markdown for links that lead
// nowhere: every relative link and image of README.md, BENCHMARKS.md and
// docs/*.md must name a file that exists, and a link with a #fragment into
// Markdown must name a heading of that file (by GitHub's rule for heading
// anchors) or an HTML id or name in it. Links to other sites (a scheme such
// as https: or mailto:, or //host) are not followed. Its test runs in
// `go test ./...`, so in `make test`.
package links

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Link is one link or image destination found in a Markdown file.
type Link struct {
	// Line is the 1-based line the destination starts on.
	Line int
	// Dest is the destination as written, fragment included.
	Dest string
}

// Problem is a link that leads nowhere.
type Problem struct {
	// File is the Markdown file the link is in, slash-separated and
	// relative to the root given to Check.
	File string
	Link
	// Reason says what is missing.
	Reason string
}

// String is the problem as an editor's error line: file:line: dest: reason.
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Dest, p.Reason)
}

// Check reads the Markdown files (slash-separated, relative to root) and
// returns every relative link or image among them that leads nowhere, in
// file and line order. An error is a file that cannot be read.
func Check(root string, files []string) ([]Problem, error) {
	texts := map[string]string{}
	read := func(name string) (string, error) {
		if s, ok := texts[name]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return "", err
		}
		texts[name] = string(b)
		return texts[name], nil
	}
	var problems []Problem
	for _, file := range files {
		text, err := read(file)
		if err != nil {
			return nil, err
		}
		for _, l := range Extract(text) {
			if reason := resolve(root, file, l.Dest, read); reason != "" {
				problems = append(problems, Problem{File: file, Link: l, Reason: reason})
			}
		}
	}
	return problems, nil
}

// external matches a destination on another site: a URL scheme, or a
// network path (//host/...).
var external = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*:|//)`)

// lineAnchor is GitHub's fragment for lines of a file that is not
// rendered as Markdown (#L10, #L10-L20).
var lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)

// resolve returns why the destination dest, written in file, leads
// nowhere, or "" when it leads somewhere (or elsewhere than this
// repository).
func resolve(root, file, dest string, read func(string) (string, error)) string {
	if external.MatchString(dest) {
		return ""
	}
	target, fragment, _ := strings.Cut(dest, "#")
	target, err := url.PathUnescape(target)
	if err != nil {
		return "a malformed path: " + err.Error()
	}
	if fragment, err = url.PathUnescape(fragment); err != nil {
		return "a malformed fragment: " + err.Error()
	}
	name := file
	if target != "" {
		if strings.HasPrefix(target, "/") { // GitHub reads it from the repository's root
			name = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			name = path.Join(path.Dir(file), target)
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			return "outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err != nil {
			return "no such file: " + name
		}
	}
	if fragment == "" {
		return ""
	}
	if !strings.EqualFold(path.Ext(name), ".md") {
		if lineAnchor.MatchString(fragment) {
			return ""
		}
		return "a fragment into " + name + ", which is not Markdown"
	}
	text, err := read(name)
	if err != nil {
		return "cannot read " + name + ": " + err.Error()
	}
	if !Anchors(text)[fragment] {
		return "no heading or id #" + fragment + " in " + name
	}
	return ""
}

var (
	// inlineLink is [text](dest) or ![alt](dest), with an optional
	// title; the text may hold one level of brackets and span lines.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(?:<([^<>\n]*)>|([^\s()<>]+))(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDef is a link reference definition: [label]: dest.
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(?:<([^<>\n]*)>|(\S+))`)
	// htmlRef is the href or src of an HTML a or img element.
	htmlRef = regexp.MustCompile(`(?i)<(?:a|img)\b[^>]*?\s(?:href|src)\s*=\s*"([^"]*)"`)
)

// Extract returns the link and image destinations of a Markdown text,
// inline, by reference definition or in HTML a and img elements, in
// order; those in fenced code blocks and code spans are not links.
func Extract(text string) []Link {
	prose := blankCode(text)
	var links []Link
	add := func(re *regexp.Regexp) {
		for _, m := range re.FindAllStringSubmatchIndex(prose, -1) {
			for g := 2; g+1 < len(m); g += 2 {
				if m[g] >= 0 {
					links = append(links, Link{Line: 1 + strings.Count(prose[:m[g]], "\n"), Dest: prose[m[g]:m[g+1]]})
					break
				}
			}
		}
	}
	add(inlineLink)
	add(refDef)
	add(htmlRef)
	sortByLine(links)
	return links
}

// sortByLine orders links by line, keeping the order of those on one line
// (an insertion sort: a file has few links).
func sortByLine(links []Link) {
	for i := 1; i < len(links); i++ {
		for j := i; j > 0 && links[j].Line < links[j-1].Line; j-- {
			links[j], links[j-1] = links[j-1], links[j]
		}
	}
}

// fence opens or closes a fenced code block: three or more backticks or
// tildes, indented by any amount (a block in a list item is indented as
// the item's text).
var fence = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})")

// blankCode returns text with its fenced code blocks and code spans
// replaced by spaces, its line breaks kept, so that what is left is prose
// and a match's offset still gives its line.
func blankCode(text string) string {
	lines := strings.SplitAfter(text, "\n")
	var open string // the fence of the block we are in
	for i, line := range lines {
		m := fence.FindStringSubmatch(line)
		switch {
		case open == "" && m != nil:
			open = m[1]
			lines[i] = blank(line)
		case open != "":
			if m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line[len(m[0]):]) == "" {
				open = ""
			}
			lines[i] = blank(line)
		}
	}
	return blankSpans(strings.Join(lines, ""))
}

// blankSpans blanks the code spans of prose: a run of n backticks up to
// the next run of exactly n, within one paragraph. A run without its match
// is literal backticks.
func blankSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := run(b, i)
		end := -1
		for j := i + n; j < len(b); {
			if b[j] == '\n' && j+1 < len(b) && isBlankLine(b[j+1:]) {
				break // a paragraph ends: no span crosses it
			}
			if b[j] == '`' {
				k := run(b, j)
				if k == n {
					end = j + k
					break
				}
				j += k
				continue
			}
			j++
		}
		if end < 0 {
			i += n
			continue
		}
		copy(b[i:end], blank(string(b[i:end])))
		i = end
	}
	return string(b)
}

// run is the length of the run of backticks at b[i].
func run(b []byte, i int) int {
	n := 0
	for i+n < len(b) && b[i+n] == '`' {
		n++
	}
	return n
}

// isBlankLine reports whether the line b starts with is empty or white
// space.
func isBlankLine(b []byte) bool {
	for _, c := range b {
		switch c {
		case '\n':
			return true
		case ' ', '\t', '\r':
		default:
			return false
		}
	}
	return true
}

// blank is s with every byte but line breaks turned into a space.
func blank(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c != '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

var (
	// atxHeading is "## text", with optional closing hashes.
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// setextUnderline underlines the line before it as a heading.
	setextUnderline = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	// htmlID is an id or name attribute in HTML, which is an anchor too.
	htmlID = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:id|name)\s*=\s*"([^"]+)"`)
)

// Anchors returns the fragments a Markdown text answers: its headings'
// anchors, as GitHub makes them (Slug, with -1, -2 … after a repeated
// one), and the id and name attributes of its HTML.
func Anchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	prose := blankCode(text)
	lines := strings.Split(prose, "\n")
	raw := strings.Split(text, "\n") // code spans kept: a heading's text includes them
	for i, line := range lines {
		heading, ok := "", false
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			heading, ok = raw[i], true
			heading = atxHeading.FindStringSubmatch(heading)[1]
		} else if i > 0 && setextUnderline.MatchString(line) && strings.TrimSpace(lines[i-1]) != "" &&
			!strings.HasPrefix(strings.TrimSpace(lines[i-1]), "|") && !atxHeading.MatchString(lines[i-1]) &&
			!setextUnderline.MatchString(lines[i-1]) {
			heading, ok = raw[i-1], true
		}
		if !ok {
			continue
		}
		slug := Slug(headingText(heading))
		anchor := slug
		if n, dup := seen[slug]; dup {
			for {
				n++
				anchor = fmt.Sprintf("%s-%d", slug, n)
				if _, taken := seen[anchor]; !taken {
					break
				}
			}
			seen[slug] = n
		}
		seen[anchor] = 0
		anchors[anchor] = true
	}
	for _, m := range htmlID.FindAllStringSubmatch(prose, -1) {
		anchors[m[1]] = true
	}
	return anchors
}

var (
	// linkInText is a link or image in a heading: its text stays.
	linkInText = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	// tag is an HTML tag in a heading: it renders as nothing.
	tag = regexp.MustCompile(`<[^>]+>`)
	// underscores is _emphasis_ (or __strong__) between word boundaries:
	// the underscores render as nothing.
	underscores = regexp.MustCompile(`(^|[^\p{L}\p{N}_])(_{1,2})([^_\s](?:[^_]*[^_\s])?)(_{1,2})([^\p{L}\p{N}_]|$)`)
)

// headingText is the text a heading renders as, the text GitHub makes its
// anchor of: code spans without their backticks, links and images without
// their destinations, no HTML tags and no emphasis underscores outside code.
// (Backticks and asterisks need no care: Slug drops them.)
func headingText(h string) string {
	var out strings.Builder
	spans := blankSpans(h) // code spans blanked: the rest is markup
	for i := 0; i < len(h); {
		if spans[i] == h[i] {
			j := i
			for j < len(h) && spans[j] == h[j] {
				j++
			}
			prose := linkInText.ReplaceAllString(h[i:j], "$1")
			prose = tag.ReplaceAllString(prose, "")
			prose = underscores.ReplaceAllString(prose, "$1$3$5")
			out.WriteString(prose)
			i = j
			continue
		}
		j := i
		for j < len(h) && spans[j] != h[j] {
			j++
		}
		out.WriteString(h[i:j]) // a code span, as written; Slug drops the backticks
		i = j
	}
	return out.String()
}

// Slug is GitHub's anchor for a heading whose text is text: lower case,
// each space a hyphen, and every character dropped that is not a letter,
// a mark, a decimal or letter number, a connector (such as _) or a hyphen.
// (GitHub: text.downcase.gsub(/[^\p{Word}\- ]/u, "").tr(" ", "-").)
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', unicode.IsLetter(r), unicode.IsMark(r), unicode.Is(unicode.Nd, r),
			unicode.Is(unicode.Nl, r), unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
