package syncbuf_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sendonce/sendonce/internal/testkit/syncbuf"
)

// Writers and a reader at once: under -race this fails if a call is not
// locked, and every line written must arrive whole.
func TestBufferConcurrentWritesAndReads(t *testing.T) {
	var b syncbuf.Buffer
	const writers, lines = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(&b, "w%d line %d\n", w, i)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range lines {
			_ = b.String()
		}
	}()
	wg.Wait()
	<-done

	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	seen := map[string]bool{}
	for _, l := range got {
		seen[l] = true
	}
	for w := range writers {
		for i := range lines {
			if l := fmt.Sprintf("w%d line %d", w, i); !seen[l] {
				t.Errorf("line %q missing or torn", l)
			}
		}
	}
}

func TestBufferZeroValueIsEmpty(t *testing.T) {
	var b syncbuf.Buffer
	if s := b.String(); s != "" {
		t.Errorf("String() = %q, want empty", s)
	}
}
