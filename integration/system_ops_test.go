package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sendonce/sendonce/internal/testkit/outboxtest"
	"github.com/sendonce/sendonce/outbox"
)

// The system test's operations. Each draws its choices from the seed's
// generator, runs, and logs itself with what its answer proved.

// sysNames is the small pool of recipients: suppressions and duplicates
// collide on them often.
var sysNames = []string{"ada", "bob", "cy", "dee", "eve", "fay"}

const sysDomain = "sys.test"

// sysForm writes the address of name in one of the forms an application
// meets: the three spellings sendonce takes (plain, "<addr>", a display
// name, bare or quoted, before "<addr>"; any case, spaces around), and,
// about one time in twelve, one that net/mail (and so the API) reads as the
// same address but sendonce refuses at enqueue (a tab before it, a
// comment, a quoted local part: issue 22, hole 3).
func sysForm(rng *rand.Rand, name string) string {
	a := name + "@" + sysDomain
	display := strings.ToUpper(name[:1]) + name[1:]
	switch r := rng.IntN(100); {
	case r < 45:
		return a
	case r < 62:
		return display + " <" + a + ">"
	case r < 72:
		return strings.ToUpper(a)
	case r < 77:
		return "<" + a + ">"
	case r < 82:
		return `"` + display + ` Doe" <` + strings.ToUpper(a) + ">"
	case r < 92:
		return " " + display + "  <" + a + "> "
	case r < 95:
		return "\t" + a
	case r < 97:
		return a + " (" + display + ")"
	case r < 99:
		return `"` + name + `"@` + sysDomain
	default:
		return display + " <" + a + "> (work)"
	}
}

// spelled is the address a form names when sendonce takes the form, as
// the suppression list holds it (lower case), and false for the forms
// sysForm draws that it refuses.
func spelled(form string) (string, bool) {
	if strings.ContainsAny(form, "\t()") || strings.Contains(form, `"@`) {
		return "", false
	}
	return canonical(form), true
}

// sysSpec is an intent the schedule made up: enough to write its body again
// in any variant (the same key with the same, or another, body).
type sysSpec struct {
	Key      string
	Kind     outbox.Kind
	Template string
	Forms    [][]string // per email: its to, as written
	Audience string
	// Tenant is the tenant the intent names ("": none; a run's member
	// that names none takes its run's).
	Tenant string
}

func (s *sysSpec) cause(i int) string {
	if s.Kind == outbox.KindBatch {
		return fmt.Sprintf("%s#%d", s.Key, i)
	}
	return s.Key
}

func (s *sysSpec) email(i, variant int) map[string]any {
	return map[string]any{
		"from":    "Shop <shop@" + sysDomain + ">",
		"to":      s.Forms[i],
		"subject": fmt.Sprintf("sys %s v%d", s.cause(i), variant),
		"text":    "hello",
	}
}

func (s *sysSpec) payload(variant int) json.RawMessage {
	switch s.Kind {
	case outbox.KindBatch:
		var emails []any
		for i := range s.Forms {
			emails = append(emails, s.email(i, variant))
		}
		return mustJSON(map[string]any{"emails": emails})
	case outbox.KindTemplate:
		return mustJSON(map[string]any{"from": "Shop <shop@" + sysDomain + ">", "to": s.Forms[0], "values": map[string]any{"v": variant}})
	case outbox.KindBroadcast:
		return mustJSON(map[string]any{"from": "news@" + sysDomain, "subject": fmt.Sprintf("sys %s v%d", s.Key, variant),
			"html": "<p>news</p>", "audienceId": s.Audience})
	}
	return mustJSON(s.email(0, variant))
}

func (s *sysSpec) intent(variant int) outbox.Intent {
	return outbox.Intent{Key: s.Key, Kind: s.Kind, TemplateID: s.Template, Payload: s.payload(variant), Tenant: s.Tenant}
}

func (s *sysSpec) units() []sysUnit {
	if s.Kind == outbox.KindBroadcast {
		return []sysUnit{{Cause: s.Key, Recipients: []string{s.Audience}}}
	}
	var out []sysUnit
	for i, forms := range s.Forms {
		u := sysUnit{Cause: s.cause(i)}
		for _, f := range forms {
			u.Recipients = append(u.Recipients, canonical(f))
		}
		out = append(out, u)
	}
	return out
}

// formsText lists the recipients as written, for the log.
func (s *sysSpec) formsText() string {
	if s.Kind == outbox.KindBroadcast {
		return "[broadcast " + s.Audience + "]"
	}
	return fmt.Sprintf("%s%q", s.Kind, s.Forms)
}

func (s *sysSpec) addrs() []string {
	var out []string
	for _, u := range s.units() {
		out = append(out, u.Recipients...)
	}
	return out
}

// newSpec makes up a new intent: mostly emails (to one or two of the pool),
// with batches, template sends and broadcasts; kind "" draws one. It names
// a drawn tenant of the seed, or none (a run's enqueue draws its members'
// again).
func (r *sysRunner) newSpec(kind outbox.Kind) *sysSpec {
	r.n++
	return r.makeSpec(fmt.Sprintf("sys:%d:%04d", r.seed, r.n), kind)
}

// makeSpec makes up a new intent of kind under key (see newSpec).
func (r *sysRunner) makeSpec(key string, kind outbox.Kind) *sysSpec {
	s := &sysSpec{Key: key, Kind: kind, Tenant: r.ten.pick()}
	if s.Kind == "" {
		switch x := r.rng.IntN(20); {
		case x < 14:
			s.Kind = outbox.KindEmail
		case x < 16:
			s.Kind = outbox.KindBatch
		case x < 18:
			s.Kind = outbox.KindTemplate
		default:
			s.Kind = outbox.KindBroadcast
		}
	}
	pick := func(n int) []string {
		var out []string
		for _, i := range r.rng.Perm(len(sysNames))[:n] {
			out = append(out, sysForm(r.rng, sysNames[i]))
		}
		return out
	}
	switch s.Kind {
	case outbox.KindEmail:
		s.Forms = [][]string{pick(1 + r.rng.IntN(2))}
	case outbox.KindBatch:
		s.Forms = [][]string{pick(1), pick(1)}
	case outbox.KindTemplate:
		s.Template = "welcome"
		s.Forms = [][]string{pick(1)}
	case outbox.KindBroadcast:
		s.Audience = fmt.Sprintf("aud_%d_%04d", r.seed, r.n)
	}
	r.specs[s.Key] = s
	r.keys = append(r.keys, s.Key)
	in := r.m.intent(s.Key)
	in.Kind, in.Units = s.Kind, s.units()
	for _, f := range s.Forms {
		in.Forms = append(in.Forms, f...)
	}
	return s
}

var errRolledBack = errors.New("rolled back on purpose")

// inTx runs fn in a transaction of the given isolation and classifies the
// answer: an error before the commit, or one the server gave (a
// serialization failure), rolled it back; a commit whose connection broke
// is uncertain.
func (r *sysRunner) inTx(iso pgx.TxIsoLevel, rollback bool, fn func(ctx context.Context, tx pgx.Tx) error) (sysOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		return outNo, err
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback(ctx)
		return outNo, err
	}
	if rollback {
		_ = tx.Rollback(ctx)
		return outNo, errRolledBack
	}
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) {
			return outNo, err
		}
		return outUncertain, err
	}
	return outYes, nil
}

// committed records what an enqueue's answer proved about key; tenant is
// the tenant its row names if this enqueue inserted it (sysTenantUnknown:
// not known, a member of a run whose tenant the model does not know).
func (r *sysRunner) committed(op *sysOp, key string, variant int, o sysOutcome, existing bool, err error, tenant string) {
	in := r.m.intent(key)
	if o != outNo && in.Committed != outYes {
		in.Tenants = append(in.Tenants, tenant)
	}
	switch o {
	case outYes:
		if in.Committed == outYes && !existing && variant == in.Variant {
			r.m.violate("1", []string{key}, nil, "op #%d: enqueue of %s, committed before (%s), inserted a new row (Existing=false)", op.Seq, key, in.CommittedAt.Format("15:04:05.000"))
		}
		if in.Committed == outYes && variant != in.Variant {
			r.m.violate("1", []string{key}, nil, "op #%d: enqueue of %s with another body (v%d, committed v%d) was accepted (Existing=%v)", op.Seq, key, variant, in.Variant, existing)
		}
		if in.Committed != outYes {
			in.Committed, in.CommittedAt, in.Variant, in.EnqueueStart = outYes, op.End, variant, op.Start
		}
	case outUncertain:
		if in.Committed == outNo {
			in.Committed, in.CommittedAt, in.Variant, in.EnqueueStart = outUncertain, op.End, variant, op.Start
		}
	default:
		var inv *outbox.InvalidError
		if errors.As(err, &inv) {
			in.Refused = append(in.Refused, err.Error())
		}
	}
}

var isolations = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// opEnqueueGo enqueues new intents (or, with old set, intents enqueued
// before, in the body committed then or in another) through the Go API in
// a transaction of a drawn isolation level, some rolled back. With kind
// enqueue-go-jobs, the same transaction gives the intents it inserted River
// jobs of their own (giveJobs), as a release before the drain did.
func (r *sysRunner) opEnqueueGo(specs []*sysSpec, variants []int, kind string) {
	iso := isolations[r.rng.IntN(len(isolations))]
	rollback := r.rng.IntN(10) == 0
	many := len(specs) > 1 || r.rng.IntN(2) == 0
	held := kind == "enqueue-go-jobs" && r.rng.IntN(2) == 0
	sendAt := time.Now().Add(time.Duration(500+r.rng.IntN(2000)) * time.Millisecond)
	op := r.begin(kind, "")
	var keys, addrs []string
	for i, s := range specs {
		keys = append(keys, fmt.Sprintf("%s/v%d%s", s.Key, variants[i], s.formsText()))
		addrs = append(addrs, s.addrs()...)
	}
	op.Detail = fmt.Sprintf("go %s many=%v rollback=%v held=%v %v%s", iso, many, rollback, held, keys, tenantsText(specs))
	op.Addrs = addrs
	var res []*outbox.EnqueueResult
	o, err := r.inTx(iso, rollback, func(ctx context.Context, tx pgx.Tx) error {
		ins := make([]outbox.Intent, len(specs))
		for i, s := range specs {
			ins[i] = s.intent(variants[i])
			if kind == "enqueue-go-jobs" && held {
				// Its job scheduled a moment ahead: a job waiting, for
				// opRiverJob to delete or discard.
				ins[i].SendAt = sendAt
			}
		}
		var err error
		if many {
			res, err = r.ob.EnqueueMany(ctx, tx, ins)
		} else {
			var one *outbox.EnqueueResult
			one, err = r.ob.Enqueue(ctx, tx, ins[0])
			res = []*outbox.EnqueueResult{one}
		}
		if err != nil || kind != "enqueue-go-jobs" {
			return err
		}
		var fresh []string
		for i, e := range res {
			if !e.Existing {
				fresh = append(fresh, specs[i].Key)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		rc, err := river.NewClient(riverpgxv5.New(r.pool), &river.Config{})
		if err != nil {
			return err
		}
		return outboxtest.GiveJobsTx(ctx, tx, rc, fresh)
	})
	r.end(op, o, err)
	for i, s := range specs {
		op.Keys = append(op.Keys, s.Key)
		existing := o == outYes && res[i] != nil && res[i].Existing
		r.committed(op, s.Key, variants[i], o, existing, err, s.Tenant)
		if kind == "enqueue-go-jobs" && o != outNo && !existing {
			r.m.intents[s.Key].Jobs = true
		}
		if o == outYes && res[i] != nil {
			op.Result += fmt.Sprintf(" %s:existing=%v", s.Key, res[i].Existing)
		}
	}
}

// opEnqueueSQL inserts new intents with plain SQL, as a producer in another
// language does, some rolled back; with run set, as members of that run.
func (r *sysRunner) opEnqueueSQL(specs []*sysSpec, variants []int, run string) {
	rollback := r.rng.IntN(10) == 0
	op := r.begin("enqueue-sql", "")
	for i, s := range specs {
		op.Keys = append(op.Keys, s.Key)
		op.Addrs = append(op.Addrs, s.addrs()...)
		op.Detail += fmt.Sprintf("%s/v%d%s ", s.Key, variants[i], s.formsText())
	}
	if run != "" {
		op.Keys = append(op.Keys, run)
		op.Detail += "run=" + run + " "
	}
	op.Detail += fmt.Sprintf("rollback=%v%s", rollback, tenantsText(specs))
	inserted := make([]int64, len(specs))
	o, err := r.inTx(pgx.ReadCommitted, rollback, func(ctx context.Context, tx pgx.Tx) error {
		for i, s := range specs {
			var tmpl, runKey *string
			if s.Template != "" {
				tmpl = &s.Template
			}
			if run != "" {
				runKey = &run
			}
			tag, err := tx.Exec(ctx, `INSERT INTO sendonce_outbox (idempotency_key, kind, payload, template_id, run_key, tenant)
				VALUES ($1, $2, $3, $4, $5, nullif($6, ''))`,
				s.Key, string(s.Kind), string(s.payload(variants[i])), tmpl, runKey, s.Tenant)
			if err != nil {
				return err
			}
			inserted[i] = tag.RowsAffected()
		}
		return nil
	})
	r.end(op, o, err)
	eff := ""
	if run != "" {
		eff = r.runAnswered(op, run, "", false, specs, o)
		if refusedAsTenant(err) {
			r.note(op, "refused: a member names another tenant than its run's (SQLSTATE 23514)")
		}
	}
	for i, s := range specs {
		tenant := s.Tenant
		if run != "" {
			r.m.intent(s.Key).Run = run
			r.m.intents[s.Key].RunSince = r.m.runSince[run]
			tenant = memberTenant(s, eff)
		}
		// A row the tombstone trigger skipped (0 rows) is an existing one.
		r.committed(op, s.Key, variants[i], o, inserted[i] == 0, err, tenant)
	}
}

// opEnqueueCLI enqueues one intent with `sendonce enqueue`.
func (r *sysRunner) opEnqueueCLI(s *sysSpec, variant int) {
	op := r.begin("enqueue-cli", fmt.Sprintf("%s/v%d%s", s.Key, variant, s.formsText()))
	op.Keys, op.Addrs = []string{s.Key}, s.addrs()
	args := []string{"enqueue", "--key", s.Key, "--kind", string(s.Kind), "--json"}
	if s.Template != "" {
		args = append(args, "--template", s.Template)
	}
	if s.Tenant != "" {
		args = append(args, "--tenant", s.Tenant)
		op.Detail += " tenant=" + s.Tenant
	}
	res := run(r.t, "enqueue", r.e, strings.NewReader(string(s.payload(variant))), args...)
	o, existing := outYes, false
	var err error
	if res.code != 0 {
		o, err = cliOutcome(res), errors.New(strings.TrimSpace(res.stderr))
	} else {
		var out struct {
			AlreadyEnqueued bool `json:"alreadyEnqueued"`
		}
		_ = json.Unmarshal([]byte(res.stdout), &out)
		existing = out.AlreadyEnqueued
	}
	r.end(op, o, err)
	op.Result += fmt.Sprintf(" existing=%v", existing)
	in := r.m.intent(s.Key)
	if o == outNo && strings.Contains(res.stderr, "invalid") {
		in.Refused = append(in.Refused, strings.TrimSpace(res.stderr))
	}
	r.committed(op, s.Key, variant, o, existing, err, s.Tenant)
}

// cliOutcome classifies a failed command: a refusal it explained, or an
// unknown sysOutcome (the database went away under it).
func cliOutcome(res result) sysOutcome {
	s := strings.ToLower(res.stderr)
	for _, w := range []string{"invalid", "reuse", "cannot", "refused", "not found", "no intent", "canceled", "is not", "want "} {
		if strings.Contains(s, w) {
			return outNo
		}
	}
	return outUncertain
}

// opReenqueue enqueues a key used before again, the oldest ones more
// often (they are the ones a prune took): with the body committed then, or
// (another=true) with another, which must be refused as a key reuse.
func (r *sysRunner) opReenqueue(another bool) {
	if len(r.keys) == 0 {
		return
	}
	// Favour old keys: the square of a uniform draw leans to the start.
	u := r.rng.Float64()
	s := r.specs[r.keys[int(u*u*float64(len(r.keys)))]]
	if s.Kind == outbox.KindBroadcast && another {
		return
	}
	in := r.m.intents[s.Key]
	if in.Run != "" {
		return // members are re-enqueued by their run
	}
	v := in.Variant
	if v == 0 {
		v = 1
	}
	if another {
		v++
	}
	kind := "reenqueue"
	if another {
		kind = "reuse-key"
	}
	if r.ten.rng.IntN(5) == 0 {
		// Under another tenant: the tenant is no part of a key's
		// identity, and the stored intent keeps its own.
		c := *s
		c.Tenant = r.ten.pick()
		s = &c
	}
	switch x := r.rng.IntN(10); {
	case x < 7:
		r.opEnqueueGo([]*sysSpec{s}, []int{v}, kind)
	case x < 9:
		r.opEnqueueSQL([]*sysSpec{s}, []int{v}, "")
	default:
		r.opEnqueueCLI(s, v)
	}
}

// opCancel cancels a recent intent, by Go or by `sendonce cancel`.
func (r *sysRunner) opCancel() {
	if len(r.keys) == 0 {
		return
	}
	key := r.keys[max(0, len(r.keys)-1-r.rng.IntN(min(len(r.keys), 8)))]
	cli := r.rng.IntN(3) == 0
	op, o := r.keyOp("cancel", key, cli, func(ctx context.Context) error {
		_, err := r.ob.Cancel(ctx, key)
		return err
	})
	in := r.m.intent(key)
	if o != outNo && in.Canceled != outYes {
		in.Canceled, in.CanceledAt = o, op.End
	}
}

// opRiverJob does to the River job of an unsent intent (one enqueued with
// a job of its own: enqueue-go-jobs), one not running, what an
// operator can do in River's UI, or a River client that does not know
// sendonce's job kind: deletes it, or discards it (River's JobDelete, like
// this, leaves a running job alone). The intent is still sent once: the
// sweeper's Reconcile gives it a new job.
func (r *sysRunner) opRiverJob() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	keys, err := queryStrings(ctx, r.pool, `SELECT o.idempotency_key FROM sendonce_outbox o JOIN river_job j ON j.id = o.job_id
		WHERE o.state IN ('pending', 'sending') AND j.state IN ('available', 'scheduled', 'retryable') ORDER BY o.id`)
	cancel()
	if err != nil || len(keys) == 0 {
		return
	}
	key := keys[r.rng.IntN(len(keys))]
	kind, sql := "river-delete", `DELETE FROM river_job j USING sendonce_outbox o
		WHERE o.idempotency_key = $1 AND o.state IN ('pending', 'sending') AND j.id = o.job_id
			AND j.state IN ('available', 'scheduled', 'retryable')`
	if r.rng.IntN(2) == 0 {
		kind, sql = "river-discard", `UPDATE river_job j SET state = 'discarded', finalized_at = now() FROM sendonce_outbox o
			WHERE o.idempotency_key = $1 AND o.state IN ('pending', 'sending') AND j.id = o.job_id
				AND j.state IN ('available', 'scheduled', 'retryable')`
	}
	op := r.begin(kind, key)
	op.Keys = []string{key}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	tag, err := r.pool.Exec(ctx, sql, key)
	cancel()
	o := outYes
	switch {
	case err != nil:
		o = outUncertain
	case tag.RowsAffected() == 0:
		o = outNo
	}
	r.end(op, o, err)
}

// keyOp runs the operation kind (cancel, retry) on key, by `sendonce KIND
// KEY` when cli, else by goOp, and records it with its outcome.
func (r *sysRunner) keyOp(kind, key string, cli bool, goOp func(ctx context.Context) error) (*sysOp, sysOutcome) {
	op := r.begin(kind, fmt.Sprintf("%s cli=%v", key, cli))
	op.Keys = []string{key}
	var o sysOutcome
	var err error
	if cli {
		res := run(r.t, kind, r.e, nil, kind, key)
		o = outYes
		if res.code != 0 {
			o, err = cliOutcome(res), errors.New(strings.TrimSpace(res.stderr))
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = goOp(ctx)
		cancel()
		o = goOutcome(err)
	}
	r.end(op, o, err)
	return op, o
}

// goOutcome classifies the error of a one-statement Go operation.
func goOutcome(err error) sysOutcome {
	if err == nil {
		return outYes
	}
	var se *outbox.StateError
	var rse *outbox.RunStateError
	var pgErr *pgconn.PgError
	if errors.As(err, &se) || errors.As(err, &rse) || errors.Is(err, outbox.ErrNotFound) || errors.Is(err, outbox.ErrInvalid) ||
		errors.As(err, &pgErr) || errors.Is(err, outbox.ErrRunCanceled) {
		return outNo
	}
	return outUncertain
}

// opRetry retries a failed (or suppressed) intent, by Go or `sendonce retry`.
func (r *sysRunner) opRetry() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	keys, err := queryStrings(ctx, r.pool, `SELECT idempotency_key FROM sendonce_outbox WHERE state IN ('failed', 'suppressed') ORDER BY id`)
	cancel()
	if err != nil || len(keys) == 0 {
		return
	}
	key := keys[r.rng.IntN(len(keys))]
	cli := r.rng.IntN(3) == 0
	op, o := r.keyOp("retry", key, cli, func(ctx context.Context) error {
		_, err := r.ob.Retry(ctx, key, &outbox.RetryOptions{ReplayWindow: sysReplayWindow})
		return err
	})
	if o != outNo {
		in := r.m.intent(key)
		in.RetriedAt = append(in.RetriedAt, op.End)
	}
}

// opSuppression adds (or removes) an address of the pool, written in a
// drawn form, by Go or `sendonce suppression add/remove`.
func (r *sysRunner) opSuppression(add bool) {
	name := r.pickName(!add)
	form := sysForm(r.rng, name)
	cli := r.rng.IntN(3) == 0
	kind := "suppress"
	if !add {
		kind = "unsuppress"
	}
	r.suppressForm(kind, form, add, cli)
}

// pickName draws a name of the pool; with onList, two times in three one
// whose address is on the suppression list now, when there is one, so that
// removals keep up with the many ways an address gets on it.
func (r *sysRunner) pickName(onList bool) string {
	if onList && r.rng.IntN(3) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := queryStrings(ctx, r.pool, `SELECT address FROM sendonce_suppression WHERE address LIKE '%@'||$1 ORDER BY address`, sysDomain)
		cancel()
		if err == nil && len(list) > 0 {
			name, _, _ := strings.Cut(list[r.rng.IntN(len(list))], "@")
			return name
		}
	}
	return sysNames[r.rng.IntN(len(sysNames))]
}

// addOrRemove adds (or removes) form by the CLI, `sendonce suppression
// add|remove form flags...`, or by Go, viaGo under a 15-second timeout, and
// returns the answer.
func (r *sysRunner) addOrRemove(add, cli bool, form string, flags []string, viaGo func(context.Context) error) (sysOutcome, error) {
	if !cli {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := viaGo(ctx)
		return goOutcome(err), err
	}
	sub := "add"
	if !add {
		sub = "remove"
	}
	res := run(r.t, "suppression", r.e, nil, append([]string{"suppression", sub, form}, flags...)...)
	if res.code != 0 {
		return cliOutcome(res), errors.New(strings.TrimSpace(res.stderr))
	}
	return outYes, nil
}

// suppressForm adds (or removes) the address form by Go or by the CLI,
// and records the answer.
func (r *sysRunner) suppressForm(kind, form string, add, cli bool) *sysOp {
	addr := canonical(form)
	op := r.begin(kind, fmt.Sprintf("%q cli=%v", form, cli))
	op.Addrs = []string{addr}
	o, err := r.addOrRemove(add, cli, form, nil, func(ctx context.Context) (err error) {
		if add {
			_, err = r.ob.Suppress(ctx, []string{form}, "system test")
		} else {
			_, err = r.ob.Unsuppress(ctx, []string{form})
		}
		return err
	})
	r.end(op, o, err)
	if _, ok := spelled(form); ok {
		// A form sendonce refuses changes nothing (and is refused).
		r.m.addrOps[addr] = append(r.m.addrOps[addr], sysAddrOp{Add: add, Start: op.Start, End: op.End, Result: o, Seq: op.Seq})
	}
	return op
}

// opPrune runs `sendonce prune` with the short retention, after keeping
// what the outbox says of every row (a pruned row's last known state).
func (r *sysRunner) opPrune() {
	op := r.begin("prune", "--retain "+sysRetain.String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rows, err := readRows(ctx, r.pool)
	cancel()
	if err != nil {
		r.end(op, outNo, err)
		return
	}
	for k, row := range rows {
		r.m.snap[k] = row
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	if b, err := readBatches(bctx, r.pool); err == nil {
		for k, v := range b {
			r.m.batchSnap[k] = v
		}
	}
	bcancel()
	res := run(r.t, "prune", r.e, nil, "prune", "--retain", sysRetain.String())
	o := outYes
	if res.code != 0 {
		o, err = outUncertain, errors.New(strings.TrimSpace(res.stderr))
	}
	r.end(op, o, err)
	op.Result += " " + strings.Join(strings.Fields(res.stdout), " ")
}

// opRunCreate enqueues a new run of email members (some held a moment).
func (r *sysRunner) opRunCreate() {
	r.nRuns++
	key := fmt.Sprintf("sysrun:%d:%02d", r.seed, r.nRuns)
	r.m.runs = append(r.m.runs, key)
	r.runKeys = append(r.runKeys, key)
	r.opRunAdd(key, 2+r.rng.IntN(5))
}

// opRunAdd enqueues n new members into run by Go (EnqueueRun), or by plain
// SQL with run_key set. A new run names a drawn tenant, or none; an
// enqueue into a run there already mostly names none (the run keeps its
// own), or the run's, or another drawn one (to be refused when the run's
// is another). Its members mostly name none (they take the run's), some
// the run's, and a few another tenant: such an enqueue must be refused
// whole (rule 13).
func (r *sysRunner) opRunAdd(key string, n int) {
	given := r.runTenantToGive(key)
	var specs []*sysSpec
	var variants []int
	for range n {
		specs = append(specs, r.newSpec(outbox.KindEmail))
		variants = append(variants, 1)
	}
	r.drawMemberTenants(key, specs, given)
	if r.rng.IntN(4) == 0 {
		r.opEnqueueSQL(specs, variants, key)
		return
	}
	var sendAt time.Time
	if r.rng.IntN(3) == 0 {
		sendAt = time.Now().Add(time.Duration(500+r.rng.IntN(2000)) * time.Millisecond)
	}
	if r.rng.IntN(4) == 0 {
		r.runEnqueueCLI(key, given, specs, sendAt)
		return
	}
	r.runEnqueue(key, given, specs, sendAt)
}

// runEnqueueCLI enqueues specs into run key with `sendonce enqueue --run`,
// one NDJSON member a line (each naming its tenant, if any), the run's
// tenant given by --tenant when tenant is not empty.
func (r *sysRunner) runEnqueueCLI(key, tenant string, specs []*sysSpec, sendAt time.Time) sysOutcome {
	op := r.begin("run-enqueue-cli", fmt.Sprintf("%s members=%d sendAt=%v tenant=%q", key, len(specs), !sendAt.IsZero(), tenant))
	op.Keys = []string{key}
	var in strings.Builder
	for _, s := range specs {
		op.Detail += " " + s.Key + s.formsText() + tenantText(s.Tenant)
		op.Keys = append(op.Keys, s.Key)
		op.Addrs = append(op.Addrs, s.addrs()...)
		r.m.intent(s.Key).Run = key
		member := map[string]any{"key": s.Key, "payload": s.payload(1)}
		if s.Tenant != "" {
			member["tenant"] = s.Tenant
		}
		in.Write(mustJSON(member))
		in.WriteByte('\n')
	}
	args := []string{"enqueue", "--run", key, "--json"}
	if !sendAt.IsZero() {
		// RFC 3339 to the second: the hold rounds down, which only starts it sooner.
		args = append(args, "--send-at", sendAt.UTC().Format(time.RFC3339))
	}
	if tenant != "" {
		args = append(args, "--tenant", tenant)
	}
	res := run(r.t, "enqueue-run", r.e, strings.NewReader(in.String()), args...)
	o := outYes
	var err error
	if res.code != 0 {
		o, err = cliOutcome(res), errors.New(strings.TrimSpace(res.stderr))
	}
	r.end(op, o, err)
	created := false
	if o == outYes {
		r.note(op, oneLine(res.stdout))
		var out struct {
			Created bool `json:"created"`
		}
		if json.Unmarshal([]byte(res.stdout), &out) == nil && out.Created {
			r.m.runSince[key] = op.Start
			created = true
		}
	}
	eff := r.runAnswered(op, key, tenant, created, specs, o)
	for _, s := range specs {
		r.committed(op, s.Key, 1, o, false, err, memberTenant(s, eff))
		r.m.intents[s.Key].RunSince = r.m.runSince[key]
	}
	return o
}

// runEnqueue enqueues specs into run key by Go (EnqueueRun), the run's
// tenant given when tenant is not empty, and returns the answer.
func (r *sysRunner) runEnqueue(key, tenant string, specs []*sysSpec, sendAt time.Time) sysOutcome {
	n := len(specs)
	op := r.begin("run-enqueue", fmt.Sprintf("%s members=%d sendAt=%v tenant=%q", key, n, !sendAt.IsZero(), tenant))
	for i, s := range specs {
		if n > 12 && i == 3 {
			op.Detail += fmt.Sprintf(" … %d more", n-4) // a race's run
			continue
		}
		if n > 12 && i > 3 && i < n-1 {
			continue
		}
		op.Detail += " " + s.Key + s.formsText() + tenantText(s.Tenant)
	}
	op.Keys = []string{key}
	for _, s := range specs {
		op.Keys = append(op.Keys, s.Key)
		op.Addrs = append(op.Addrs, s.addrs()...)
		r.m.intent(s.Key).Run = key
	}
	var res *outbox.RunResult
	o, err := r.inTx(pgx.ReadCommitted, false, func(ctx context.Context, tx pgx.Tx) error {
		run := outbox.Run{Key: key, SendAt: sendAt, Tenant: tenant}
		for _, s := range specs {
			run.Intents = append(run.Intents, s.intent(1))
		}
		var err error
		res, err = r.ob.EnqueueRun(ctx, tx, run)
		return err
	})
	r.end(op, o, err)
	created := o == outYes && res != nil && res.Created
	if created {
		if _, before := r.m.runSince[key]; before {
			r.note(op, "created the run anew: the old one was pruned when done")
		}
		r.m.runSince[key] = op.Start
	}
	eff := r.runAnswered(op, key, tenant, created, specs, o)
	for i, s := range specs {
		existing := o == outYes && res != nil && res.Intents[i].Existing
		r.committed(op, s.Key, 1, o, existing, err, memberTenant(s, eff))
		r.m.intents[s.Key].RunSince = r.m.runSince[key]
	}
	return o
}

// opRunOp pauses, resumes, cancels or reschedules a run, by Go.
func (r *sysRunner) opRunOp(kind string) {
	if len(r.runKeys) == 0 {
		return
	}
	key := r.runKeys[r.rng.IntN(len(r.runKeys))]
	op := r.runOp(key, kind, "")
	if kind == "cancel" && op.Result == outYes.String() && r.rng.IntN(3) == 0 {
		// Hole 6's shape: a plain-SQL member of the run just canceled,
		// which must be refused.
		s := []*sysSpec{r.newSpec(outbox.KindEmail)}
		r.drawMemberTenants(key, s, "")
		r.opEnqueueSQL(s, []int{1}, key)
	}
}

// runOp pauses, resumes, cancels or reschedules run key, by Go, and
// records the answer; note adds to the log.
func (r *sysRunner) runOp(key, kind, note string) *sysOp {
	op := r.begin("run-"+kind, key+note)
	op.Keys = []string{key}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var err error
	var canceled int64
	switch kind {
	case "pause":
		_, err = r.ob.PauseRun(ctx, key)
	case "resume":
		_, err = r.ob.ResumeRun(ctx, key)
	case "cancel":
		var rc *outbox.RunCancel
		rc, err = r.ob.CancelRun(ctx, key)
		if rc != nil {
			canceled = rc.Canceled
		}
	case "reschedule":
		at := time.Now().Add(time.Duration(300+r.rng.IntN(1500)) * time.Millisecond)
		_, err = r.ob.RescheduleRun(ctx, key, at)
	}
	o := goOutcome(err)
	r.end(op, o, err)
	r.m.runOps[key] = append(r.m.runOps[key], sysRunOp{Kind: kind, Start: op.Start, End: op.End, Result: o, Canceled: canceled, Seq: op.Seq})
	if kind == "cancel" {
		r.note(op, fmt.Sprintf("canceled=%d", canceled))
	}
	return op
}

// opPruneRace enqueues an old key again in a REPEATABLE READ or
// SERIALIZABLE transaction whose snapshot was taken before a prune that
// removes it (hole 1's shape): the enqueue must find the key's tombstone
// (Existing) or fail, never insert a new row the API would send again.
func (r *sysRunner) opPruneRace() {
	// A key the prune will take: settled, past retention, in no run.
	qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	keys, err := queryStrings(qctx, r.pool, `SELECT idempotency_key FROM sendonce_outbox
		WHERE state IN ('sent', 'failed', 'canceled', 'suppressed') AND run_key IS NULL AND batch_key IS NULL
			AND updated_at < now() - $1::float8 * interval '1 second' ORDER BY id LIMIT 20`, sysRetain.Seconds()+0.5)
	cancel()
	if err != nil || len(keys) == 0 {
		return
	}
	s := r.specs[keys[r.rng.IntN(len(keys))]]
	in := r.m.intents[s.Key]
	if s == nil || in.Variant == 0 {
		return
	}
	iso := isolations[1+r.rng.IntN(2)]
	op := r.begin("reenqueue-across-prune", fmt.Sprintf("go %s %s/v%d, snapshot before prune --retain %s", iso, s.Key, in.Variant, sysRetain))
	op.Keys, op.Addrs = []string{s.Key}, s.addrs()
	var res *outbox.EnqueueResult
	o, err := r.inTx(iso, false, func(ctx context.Context, tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM sendonce_outbox`).Scan(&n); err != nil {
			return err
		}
		prune := run(r.t, "prune", r.e, nil, "prune", "--retain", sysRetain.String())
		op.Detail += " [prune: " + strings.Join(strings.Fields(prune.stdout+prune.stderr), " ") + "]"
		var err error
		res, err = r.ob.Enqueue(ctx, tx, s.intent(in.Variant))
		return err
	})
	r.end(op, o, err)
	existing := o == outYes && res != nil && res.Existing
	op.Result += fmt.Sprintf(" existing=%v", existing)
	r.committed(op, s.Key, in.Variant, o, existing, err, s.Tenant)
}

// sysTopic is the topic opTopicUnsubscribe unsubscribes pool addresses
// from. No intent of the system test has a topic, so the model holds that
// these unsubscribes suppress nothing: a topic's entry stops only that
// topic's intents, and an intent parked as suppressed with none of its
// recipients ever on the (global) list is a violation (model check 2).
const sysTopic = "sysnews"

// opTopicUnsubscribe unsubscribes (or resubscribes) an address of the pool
// from sysTopic, by Go or `sendonce suppression add/remove --topic`.
func (r *sysRunner) opTopicUnsubscribe(add bool) {
	form := sysForm(r.rng, sysNames[r.rng.IntN(len(sysNames))])
	cli := r.rng.IntN(3) == 0
	kind := "unsubscribe-topic"
	if !add {
		kind = "resubscribe-topic"
	}
	op := r.begin(kind, fmt.Sprintf("%q topic=%s cli=%v", form, sysTopic, cli))
	op.Addrs = []string{canonical(form)}
	o, err := r.addOrRemove(add, cli, form, []string{"--topic", sysTopic}, func(ctx context.Context) (err error) {
		if add {
			_, err = r.ob.Unsubscribe(ctx, form, sysTopic, "system test")
		} else {
			_, err = r.ob.Resubscribe(ctx, form, sysTopic, "system test")
		}
		return err
	})
	r.end(op, o, err)
	// Not an address op of the model's (m.addrOps): it changes no intent.
}
