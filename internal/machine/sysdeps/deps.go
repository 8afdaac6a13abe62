package sysdeps

import (
	"errors"
	"os"
	"os/exec"
)

// EnvChromium names the Chromium (or Chrome) binary the browser tests use,
// instead of looking for one.
const EnvChromium = "SENDONCE_CHROMIUM"

// Chromium is the browser the outbox page's tests drive: Debian's chromium
// package.
var Chromium = Dep{
	Name: "Chromium (for the browser tests)",
	Find: findChromium,
	Apt:  "chromium",
	Brew: "--cask chromium",
}

func findChromium() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", errors.New(EnvChromium + "=" + p + " is not an executable file")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	for _, p := range []string{"/usr/bin/chromium", "/Applications/Chromium.app/Contents/MacOS/Chromium"} {
		if isExec(p) {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH nor in /usr/bin")
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// EnvPgBouncer names the pgbouncer binary the pooler tests use, instead of
// looking for one.
const EnvPgBouncer = "SENDONCE_PGBOUNCER"

// PgBouncer is the connection pooler the pooler tests put in front of the
// test cluster (package internal/machine/pgbouncer): Debian's pgbouncer package.
var PgBouncer = Dep{
	Name: "PgBouncer (for the pooler tests)",
	Find: findPgBouncer,
	Apt:  "pgbouncer",
	Brew: "pgbouncer",
}

func findPgBouncer() (string, error) {
	if p := os.Getenv(EnvPgBouncer); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", errors.New(EnvPgBouncer + "=" + p + " is not an executable file")
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer", "/opt/homebrew/bin/pgbouncer"} {
		if isExec(p) {
			return p, nil
		}
	}
	return "", errors.New("no pgbouncer on PATH nor in /usr/sbin")
}
