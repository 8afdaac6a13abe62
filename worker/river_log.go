package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// riverLog is the River client's logger, less River's line about a job's
// error where the worker logged that error itself. A send of an intent
// with a River job of its own (a database upgraded from a release before
// the drain), or of a batch, that fails and will be retried logs "send
// failed, will retry" with the key and the reason; River then logged the
// same failure again at INFO ("JobExecutor: Job errored; retrying", with
// the same reason as error): every retry twice. The drain's sends have no
// River job, and log once.
type riverLog struct {
	logger *slog.Logger // River's: the Config.Logger's handler, behind quietHandler
	logged sync.Map     // job id → struct{}: errors the worker logged, River's line to drop
}

func newRiverLog(base *slog.Logger) *riverLog {
	l := &riverLog{}
	l.logger = slog.New(quietHandler{Handler: base.Handler(), log: l})
	return l
}

// loggedError notes that the worker logged the error job id's work is
// about to return, so River's line about it is dropped. Nothing is noted
// when River's logger would not write the line (INFO off): nothing would
// take the note out again.
func (l *riverLog) loggedError(ctx context.Context, id int64) {
	if l != nil && id != 0 && l.logger.Enabled(ctx, slog.LevelInfo) {
		l.logged.Store(id, struct{}{})
	}
}

// riverErrorLines are River's messages (after its "JobExecutor: " name)
// about a job that returned an error.
var riverErrorLines = []string{": Job errored; retrying", ": Job errored", ": Job stopped due to client shutdown; retrying"}

// quietHandler drops River's line about a job's error when the worker
// logged that error (riverLog.loggedError), and passes on everything else.
type quietHandler struct {
	slog.Handler
	log *riverLog
}

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && h.isLogged(r) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietHandler) isLogged(r slog.Record) bool {
	errorLine := false
	for _, m := range riverErrorLines {
		errorLine = errorLine || strings.HasSuffix(r.Message, m)
	}
	if !errorLine {
		return false
	}
	var id int64
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "job_id" && a.Value.Kind() == slog.KindInt64 {
			id = a.Value.Int64()
			return false
		}
		return true
	})
	_, logged := h.log.logged.LoadAndDelete(id)
	return logged
}

func (h quietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietHandler{Handler: h.Handler.WithAttrs(attrs), log: h.log}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{Handler: h.Handler.WithGroup(name), log: h.log}
}
