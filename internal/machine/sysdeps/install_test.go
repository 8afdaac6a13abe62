package sysdeps_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sendonce/sendonce/internal/machine/sysdeps"
)

// TestEnsureInstalls runs the install as it runs on Debian, with stand-ins
// for apt-get and sudo on PATH that log their arguments: the first install
// fails as it does with stale package lists, so Ensure updates them and
// installs again; then it finds the program, having said what it ran.
func TestEnsureInstalls(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the apt-get path is Linux's; macOS installs with Homebrew")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	write := func(name, script string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("apt-get", `echo "apt-get $*" >> `+log+`
case "$1" in
update) touch `+dir+`/updated ;;
install) [ -f `+dir+`/updated ] || exit 100; touch `+dir+`/thing ;;
esac
`)
	write("sudo", `echo "sudo $*" >> `+log+`
[ "$1" = -n ] && shift
exec "$@"
`)
	t.Setenv("PATH", dir+":/usr/bin:/bin")
	t.Setenv(sysdeps.EnvNoInstall, "")
	thing := sysdeps.Dep{Name: "the thing", Apt: "thing-server", Find: func() (string, error) {
		p := filepath.Join(dir, "thing")
		if _, err := os.Stat(p); err != nil {
			return "", err
		}
		return p, nil
	}}
	var out strings.Builder
	where, err := sysdeps.Ensure(t.Context(), thing, &out)
	if err != nil || where != filepath.Join(dir, "thing") {
		t.Fatalf("Ensure: %q, %v\n%s", where, err, out.String())
	}
	ran, _ := os.ReadFile(log)
	calls := strings.ReplaceAll(string(ran), "sudo -n true\n", "") // sudo's check, when not root
	prefix := ""
	if os.Geteuid() != 0 {
		prefix = "sudo -n "
	}
	want := prefix + "apt-get install -y -q thing-server\n" + prefix + "apt-get update -q\n" + prefix + "apt-get install -y -q thing-server\n"
	if os.Geteuid() != 0 {
		want = ""
		for _, c := range []string{"install -y -q thing-server", "update -q", "install -y -q thing-server"} {
			want += "sudo -n apt-get " + c + "\napt-get " + c + "\n"
		}
	}
	if calls != want {
		t.Errorf("ran:\n%s\nwant:\n%s", calls, want)
	}
	for _, s := range []string{"the thing: missing", "installing it: " + prefix + "apt-get install -y -q thing-server", "the thing: installed (" + dir + "/thing)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("Ensure did not say %q:\n%s", s, out.String())
		}
	}
	if !strings.HasSuffix(sysdeps.Command(thing), "apt-get install -y thing-server") {
		t.Errorf("Command = %q", sysdeps.Command(thing))
	}
}
