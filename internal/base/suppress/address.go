package suppress

import (
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The address rule (issue 22). The API reads a recipient with RFC 5322's
// grammar (Go's net/mail in the fake), which has many spellings of one
// address: comments ("ada@example.com (Ada)"), quoted local parts
// ("\"ada\"@example.com"), folding whitespace, groups. The suppression list
// matches one normal form, computed by Address here and by sendonce_address
// in SQL (migration 00013); a spelling the two read differently from the
// API is a suppressed address mailed again. So sendonce takes, at enqueue
// and in Suppress, only the spellings one regular expression reads, the
// same text in Go and in PostgreSQL:
//
//	local@domain
//	<local@domain>
//	Display Name <local@domain>      the name unquoted, or quoted as a whole
//
// with spaces (U+0020, nothing else) around. local is a dot-atom of ASCII
// atext; domain is labels of ASCII letters, digits and hyphens (an
// internationalised domain in its xn-- form); an address is at most 320
// characters. The normal form is local@domain in ASCII lower case: no
// Unicode case mapping, which Go and PostgreSQL (by its locale) do not do
// alike. Every spelling the expression takes means the same address to
// net/mail (FuzzAddress checks it), and it parses each one way only, so
// the address is in one place of it, where spell here and
// sendonce_address_part in SQL take it from.
const (
	atext    = "-A-Za-z0-9!#$%&'*+/=?^_`{|}~"
	dotAtom  = "[" + atext + "]+(?:\\.[" + atext + "]+)*"
	label    = "[-A-Za-z0-9]+"
	addrSpec = dotAtom + "@" + label + "(?:\\." + label + ")*"
	// nonASCII is what a display name may hold beyond ASCII: everything
	// but the C1 controls, the spaces other than U+0020 and the invisible
	// format characters (zero-width, bidirectional controls, BOM).
	// PostgreSQL writes these ranges \u00A1-\u167F…; the rest of the
	// expression is the same text there.
	nonASCII = `\x{A1}-\x{167F}\x{1681}-\x{1FFF}\x{2010}-\x{2027}\x{2030}-\x{205E}\x{2070}-\x{2FFF}\x{3001}-\x{FEFE}\x{FF00}-\x{10FFFF}`
	word     = "[" + atext + "." + nonASCII + "]+"
	phrase   = word + "(?: +" + word + ")*"
	quoted   = `"(?:[ !#-Z^-~` + nonASCII + `]|\[|\]|\\[ -~])*"`
	formRE   = `^ *(?:(` + addrSpec + `)|(?:(?:` + phrase + `|` + quoted + `) *)?<(` + addrSpec + `)>) *$`
)

// form is the rule's expression, the one PostgreSQL runs. Go runs spell,
// the same grammar written out, which costs a tenth of the expression on
// the enqueue path; FuzzAddress holds the two to the same answers.
var form = regexp.MustCompile(formRE)

// MaxAddress is the longest address (local@domain) taken, as the
// suppression list's check has it.
const MaxAddress = 320

// Address returns the normal form of a recipient, the form the
// suppression list holds: local@domain in lower case. It returns "" for a
// spelling sendonce does not take (see Why).
func Address(a string) string {
	if !Taken(a) {
		return ""
	}
	addr, _ := spell(a)
	return strings.ToLower(addr) // ASCII only, by the grammar
}

// Taken reports whether sendonce takes the spelling a: whether Address
// returns its normal form rather than "". It builds nothing, and keeps
// nothing of a, so a check of many recipients (outbox's validation of
// every intent enqueued) allocates nothing for it.
func Taken(a string) bool {
	if !utf8.ValidString(a) {
		return false
	}
	addr, ok := spell(a)
	return ok && len(addr) <= MaxAddress
}

// spell matches a against formRE's grammar and returns the address it
// names, as written. The grammar reads any string one way only, so: the
// spaces around go; a spelling with a "<" names the address between its
// last "<" and a final ">", and what comes before (spaces aside) is a
// display name or nothing; one without is a bare address.
func spell(a string) (string, bool) {
	s := strings.Trim(a, " ")
	k := strings.LastIndexByte(s, '<')
	if k < 0 {
		return s, isAddrSpec(s)
	}
	if !strings.HasSuffix(s, ">") {
		return "", false
	}
	addr := s[k+1 : len(s)-1]
	name := strings.TrimRight(s[:k], " ")
	if !isAddrSpec(addr) {
		return "", false
	}
	switch {
	case name == "":
		return addr, true
	case name[0] == '"':
		return addr, isQuoted(name)
	}
	return addr, isPhrase(name)
}

// isAddrSpec: dot-atom "@" label *("." label).
func isAddrSpec(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	return ok && isDotted(local, isAtext) && isDotted(domain, isLDH)
}

// isDotted: one or more runs of bytes that in, separated by single dots.
func isDotted(s string, in func(byte) bool) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.' && run > 0:
			run = 0
		case c != '.' && in(c):
			run++
		default:
			return false
		}
	}
	return run > 0
}

func isAtext(c byte) bool { return atextSet[c] }

func isLDH(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// atextSet holds atext's bytes: letters, digits and "-!#$%&'*+/=?^_`{|}~".
var atextSet = func() (set [256]bool) {
	for c := range 256 {
		set[c] = isLDH(byte(c)) || strings.IndexByte("!#$%&'*+/=?^_`{|}~", byte(c)) >= 0
	}
	return set
}()

// isPhrase: words of atext, "." and nameRune, separated by runs of
// spaces; s has none around and is not empty.
func isPhrase(s string) bool {
	for _, r := range s {
		if !(r == ' ' || r == '.' || r < utf8.RuneSelf && isAtext(byte(r)) || nameRune(r)) {
			return false
		}
	}
	return true
}

// isQuoted: s is one quoted string: qtext (ASCII but controls, '"' and
// '\\'), space, nameRune, or "\\" and a printable ASCII character.
func isQuoted(s string) bool {
	for i := 1; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			return i == len(s)-1
		case r == '\\':
			if i+1 >= len(s) || s[i+1] < ' ' || s[i+1] > '~' {
				return false
			}
			n = 2
		case r < utf8.RuneSelf && (r < ' ' || r == 0x7f):
			return false
		case r >= utf8.RuneSelf && !nameRune(r):
			return false
		}
		i += n
	}
	return false
}

// nameRune reports whether a display name may hold r beyond ASCII: the
// ranges of nonASCII.
func nameRune(r rune) bool {
	switch {
	case r < 0xA1:
		return false
	case r <= 0x167F, r >= 0x1681 && r <= 0x1FFF, r >= 0x2010 && r <= 0x2027, r >= 0x2030 && r <= 0x205E,
		r >= 0x2070 && r <= 0x2FFF, r >= 0x3001 && r <= 0xFEFE, r >= 0xFF00 && r <= 0x10FFFF:
		return true
	}
	return false
}

// The checks Why makes, in this order, as sendonce_address_problem does
// in SQL (messages only: what is taken is Address's alone).
var (
	quotedString = regexp.MustCompile(`"(?:[^"\\]|\\[\s\S])*"`)
	wholeQuoted  = regexp.MustCompile(`^ *"(?:[^"\\]|\\[\s\S])*" *<`)
	invisible    = regexp.MustCompile(`[\x{80}-\x{A0}\x{1680}\x{2000}-\x{200F}\x{2028}-\x{202F}\x{205F}-\x{206F}\x{3000}\x{FEFF}]`)
)

// Why says, for a spelling Address refuses, what is wrong with it and,
// when the API's parser reads it as an address sendonce takes, how to
// write that one: `has a comment in parentheses; sendonce takes only
// local@domain and Display Name <local@domain>, the forms its suppression
// list matches: use "Ada <ada@example.com>"`.
func Why(a string) string {
	why := problem(a) + "; sendonce takes only local@domain and Display Name <local@domain>, the forms its suppression list matches"
	if s := suggest(a); s != "" {
		why += fmt.Sprintf(": use %q", s)
	}
	return why
}

func problem(a string) string {
	if !utf8.ValidString(a) {
		return "is not valid UTF-8"
	}
	switch {
	case strings.Contains(a, "\t"):
		return "holds a tab"
	case strings.ContainsAny(a, "\r\n"):
		return "holds a line break"
	case strings.IndexFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "holds a control character"
	}
	if m := invisible.FindString(a); m != "" {
		r, _ := utf8.DecodeRuneInString(m)
		return fmt.Sprintf("holds %U, a control, invisible or space character other than U+0020", r)
	}
	if strings.Contains(a, `"@`) {
		return "has a quoted local part"
	}
	bare := quotedString.ReplaceAllString(a, `""`)
	// inner is the address part: between the last "<" and the ">" after
	// it, or all of a spelling without "<" but the spaces around.
	inner := strings.Trim(bare, " ")
	if i := strings.LastIndexByte(bare, '<'); i >= 0 {
		inner, _, _ = strings.Cut(bare[i+1:], ">")
	}
	at := strings.LastIndexByte(inner, '@')
	switch {
	case strings.Contains(bare, "("):
		return "has a comment in parentheses"
	case strings.Contains(bare, ":"):
		return "is a group"
	case strings.ContainsAny(bare, ",;"):
		return `has "," or ";" outside quotes: several addresses, or a display name to quote`
	case strings.Contains(a, "@["):
		return "has a domain literal"
	case at >= 0 && strings.Contains(inner, " "):
		return "has a space inside the address"
	case at >= 0 && strings.IndexFunc(inner[at:], isNonASCII) >= 0:
		return "has a domain in Unicode: write it in its ASCII (xn--) form"
	case at >= 0 && strings.IndexFunc(inner, isNonASCII) >= 0:
		return "has a local part that is not ASCII"
	case strings.Contains(bare, `"`) && !wholeQuoted.MatchString(a):
		return "has a display name partly quoted: quote all of it or none of it"
	case at >= 0 && strings.Trim(inner[at+1:], "-.ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != "":
		return "has a domain with a character other than a letter, digit, hyphen or dot"
	case len(inner) > MaxAddress && isSpelled(a):
		return fmt.Sprintf("has an address of %d characters, over %d", len(inner), MaxAddress)
	}
	return "is not an email address" // Why gives the forms taken
}

func isNonASCII(r rune) bool { return r >= utf8.RuneSelf }

func isSpelled(a string) bool {
	_, ok := spell(a)
	return ok
}

// suggest returns the spelling sendonce takes of the address the API's
// parser reads in a, or "".
func suggest(a string) string {
	p, err := mail.ParseAddress(a)
	if err != nil {
		return ""
	}
	s := p.Address
	if name := strings.Join(strings.FieldsFunc(p.Name, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || invisible.MatchString(string(r))
	}), " "); name != "" {
		s = name + " <" + p.Address + ">"
		if Address(s) == "" {
			s = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `" <` + p.Address + ">"
		}
	}
	if Address(s) == "" {
		return ""
	}
	return s
}
