package sysdeps_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/machine/sysdeps"
)

func TestEnsureFound(t *testing.T) {
	var out strings.Builder
	d := sysdeps.Dep{Name: "thing", Find: func() (string, error) { return "/usr/bin/thing", nil }, Apt: "thing"}
	where, err := sysdeps.Ensure(t.Context(), d, &out)
	if err != nil || where != "/usr/bin/thing" {
		t.Fatalf("Ensure: %q, %v", where, err)
	}
	if out.Len() != 0 {
		t.Errorf("Ensure said %q for a program that is there: it should be quiet", out.String())
	}
}

// TestEnsureNoInstall: with SENDONCE_NO_INSTALL set, a missing program is an
// error naming it, where it was looked for, and the one command to run;
// nothing is run.
func TestEnsureNoInstall(t *testing.T) {
	t.Setenv(sysdeps.EnvNoInstall, "1")
	var out strings.Builder
	d := sysdeps.Dep{Name: "the thing", Find: func() (string, error) { return "", errors.New("not in /opt/thing") },
		Apt: "thing-server", Brew: "thing"}
	_, err := sysdeps.Ensure(t.Context(), d, &out)
	var me *sysdeps.MissingError
	if !errors.As(err, &me) || !errors.Is(err, sysdeps.ErrMissing) {
		t.Fatalf("Ensure: %v, want a *MissingError", err)
	}
	want := map[string]string{"linux": "apt-get install -y thing-server", "darwin": "brew install thing"}[runtime.GOOS]
	for _, s := range []string{"the thing not found", "not in /opt/thing", sysdeps.EnvNoInstall, want} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error lacks %q: %v", s, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("Ensure said %q though it installed nothing", out.String())
	}
}

// TestEnsureNoPackage: a program with no package for this system gets no
// install attempt, and an error that says why.
func TestEnsureNoPackage(t *testing.T) {
	var out strings.Builder
	d := sysdeps.Dep{Name: "the thing", Find: func() (string, error) { return "", errors.New("nowhere") }}
	_, err := sysdeps.Ensure(t.Context(), d, &out)
	if !errors.Is(err, sysdeps.ErrMissing) || !strings.Contains(err.Error(), "no package manager known") {
		t.Fatalf("Ensure: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("Ensure said %q", out.String())
	}
}

func TestChromiumFromTheEnvironment(t *testing.T) {
	t.Setenv(sysdeps.EnvChromium, "/nonexistent/chromium")
	if _, err := sysdeps.Chromium.Find(); err == nil || !strings.Contains(err.Error(), sysdeps.EnvChromium) {
		t.Errorf("Find with a bad %s: %v", sysdeps.EnvChromium, err)
	}
}
