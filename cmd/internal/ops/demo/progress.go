package demo

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"

	"github.com/sendonce/sendonce/internal/base/store"
)

// counts are the run's intents by outcome, read from the outbox.
type counts struct {
	Sent     int // state sent
	Settled  int // sent, failed, canceled or suppressed: no worker will touch it again
	Sending  int // claimed by a worker (or left so by a dead one)
	Replayed int // sent, and the API's answer was a replay
}

// readCounts counts this run's intents. It is scoped to the run's keys,
// where outbox.ReadStats counts the whole table: on a database of your own
// other intents would blur the picture.
func (d *demo) readCounts(ctx context.Context) (counts, error) {
	sc, err := store.DemoReadCounts(ctx, d.pool, d.plan.keyPrefix())
	c := counts(sc)
	if err != nil {
		return c, fmt.Errorf("demo: read the outbox: %w", err)
	}
	return c, nil
}

// bar shows the sent intents: a live progress bar on a terminal, nothing
// elsewhere (a log or a test reads the lines around it instead).
type bar struct {
	out io.Writer
	pb  *progressbar.ProgressBar
}

func (d *demo) newBar(total int, desc string) *bar {
	b := &bar{out: d.out}
	if !isTerminal(d.out) {
		return b
	}
	b.pb = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(d.out),
		progressbar.OptionSetDescription("   "+desc),
		progressbar.OptionSetWidth(32),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("sent"),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionSetTheme(progressbar.Theme{
			Saucer: "=", SaucerHead: ">", SaucerPadding: " ", BarStart: "[", BarEnd: "]",
		}),
	)
	return b
}

func (b *bar) set(n int) {
	if b.pb != nil {
		_ = b.pb.Set(n)
	}
}

func (b *bar) describe(desc string) {
	if b.pb != nil {
		b.pb.Describe("   " + desc)
	}
}

// println writes a line of the step above the bar.
func (b *bar) println(format string, args ...any) {
	if b.pb != nil {
		_ = b.pb.Clear()
	}
	fmt.Fprintf(b.out, "   "+format+"\n", args...)
	if b.pb != nil {
		_ = b.pb.RenderBlank()
	}
}

// close leaves the bar as it stands on its own line.
func (b *bar) close() {
	if b.pb != nil {
		_ = b.pb.Exit()
		fmt.Fprintln(b.out)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
