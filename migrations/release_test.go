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
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

// startRelease builds the release's sendonce from releaseCommit (git
// archive of this checkout's history, then go build) and starts `sendonce
// work` on the pool's database against the fake API at apiURL. It returns
// nil when the commit is not in the history (a shallow or exported copy).
func startRelease(t *testing.T, ctx context.Context, pool *pgxpool.Pool, apiURL string) *releaseWorker {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", releaseCommit+"^{commit}").Run(); err != nil {
		return nil
	}
	src := t.TempDir()
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", releaseCommit)
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	tarball, err := archive.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v: %s", releaseCommit, err, stderr.String())
	}
	if err := untar(tarball, src); err != nil {
		t.Fatalf("unpack the release: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "sendonce-release")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sendonce")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the release's sendonce: %v\n%s", err, out)
	}

	w := &releaseWorker{out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	w.cmd = exec.Command(bin, "work", "--concurrency", "5", "--sweep-interval", "200ms",
		"--fetch-poll-interval", "200ms", "--http-addr", "", "--log-format", "text")
	w.cmd.Env = append(os.Environ(), "DATABASE_URL="+pool.Config().ConnString(),
		"OPENEMAIL_API_KEY="+upgradeAPIKey, "OPENEMAIL_BASE_URL="+apiURL)
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
