package migrations_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// releaseWorker is a `sendonce work` process of the release.
type releaseWorker struct {
	// bin is the release's sendonce binary, for its other subcommands
	// (see run).
	bin  string
	env  []string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

// buildRelease builds the sendonce of a release from its commit (git
// archive of this checkout's history, then go build) and returns the
// binary's path, or "" when the commit is not in the history (a shallow or
// exported copy).
func buildRelease(t *testing.T, ctx context.Context, commit string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		return ""
	}
	src := t.TempDir()
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	tarball, err := archive.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v: %s", commit, err, stderr.String())
	}
	if err := untar(tarball, src); err != nil {
		t.Fatalf("unpack the release: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "sendonce-release")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sendonce")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the release's sendonce (%s): %v\n%s", commit, err, out)
	}
	return bin
}

// startRelease builds the release's sendonce from commit (buildRelease)
// and starts `sendonce work` on the pool's database against the fake API
// at apiURL, with args after the test's own flags (a flag given again
// takes the later value). It returns nil when the commit is not in the
// history.
func startRelease(t *testing.T, ctx context.Context, pool *pgxpool.Pool, apiURL, commit string, args ...string) *releaseWorker {
	t.Helper()
	bin := buildRelease(t, ctx, commit)
	if bin == "" {
		return nil
	}
	w := &releaseWorker{bin: bin, out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	w.env = append(os.Environ(), "DATABASE_URL="+pool.Config().ConnString(),
		"OPENEMAIL_API_KEY="+upgradeAPIKey, "OPENEMAIL_BASE_URL="+apiURL)
	w.cmd = exec.Command(bin, append([]string{"work", "--concurrency", "5", "--sweep-interval", "200ms",
		"--fetch-poll-interval", "200ms", "--http-addr", "", "--log-format", "text"}, args...)...)
	w.cmd.Env = w.env
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start the release's worker: %v", err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("the release's worker printed:\n%s", w.out)
		}
	})
	return w
}

// run runs another subcommand of the release's sendonce (enqueue, say) on
// the worker's database, with stdin as its input, and returns what it
// printed; it fails the test when the command fails.
func (w *releaseWorker) run(t *testing.T, ctx context.Context, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Env = w.env
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the release's sendonce %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kill ends the release's worker with SIGKILL, as a crash does, and waits
// for it: whatever it had in flight is cut off.
func (w *releaseWorker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill the release's worker: %v", err)
	}
	<-w.done
}

// stop ends the release's worker with SIGTERM, as a rollout does, and
// waits for it: its sends in flight finish first.
func (w *releaseWorker) stop(t *testing.T) {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("the release's worker: %v", err)
		} else if err != nil {
			t.Errorf("the release's worker exited %v:\n%s", err, w.out)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the release's worker did not stop within 60 s of SIGTERM:\n%s", w.out)
	}
}

// untar writes the files of a tar archive under dir.
func untar(tarball []byte, dir string) error {
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(os.PathSeparator)) {
			return errors.New("tar entry outside the directory: " + h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}
