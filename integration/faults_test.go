package integration

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sendonce/sendonce/fakeapi"
	"github.com/sendonce/sendonce/internal/testkit/pgtest"
)

// faultClass is a group of intents that meet the same faults, selected by
// their recipients' addresses (f-CLASS-NN@faults.test), so a worker that
// changed keys between attempts would still meet them.
type faultClass struct {
	name  string
	rules []string // fault rules, to= is added
	// seq is the statuses the fake must log for each intent of the class,
	// in order: a status, "r" appended for a replayed answer, "drop" for a
	// dropped connection. Empty: random faults, checked by the rules only.
	seq string
	n   int
}

// TestFaults makes the API lose answers after delivering (dropped
// connections, 5xx after the work, answers slower than the client's
// timeout), fail before delivering, pace with Retry-After (seconds and
// HTTP-date, 429 and 503) and rate-limit without Retry-After. It checks
// exactly-once delivery, and reads the worker's waits from the fake's
// request log against the retry contract: the same key on every attempt,
// backoff retry n after [cap/2, cap] with cap = min(0.5s·2^(n-1), 8s),
// Retry-After honoured exactly; after a 429 that named no wait the call
// ends, and the worker sends again once the fleet's budget gives it a
// token or the intent's own backoff is over.
func TestFaults(t *testing.T) {
	setup(t)
	start := time.Now()
	per := 4 * suite.scale
	classes := []faultClass{
		{name: "ok", seq: "200"},
		{name: "e503x2", rules: []string{"error_before=503;times=2"}, seq: "503 503 200"},
		{name: "e500after", rules: []string{"error_after=500;times=1"}, seq: "500 200r"},
		{name: "drop", rules: []string{"drop_after;times=1"}, seq: "drop 200r"},
		{name: "hang", rules: []string{"latency=5s;times=1"}, seq: "499 200"},
		{name: "slow", rules: []string{"latency_after=5s;times=1"}, seq: "499 200r"},
		{name: "ra1", rules: []string{"retry_after=1;times=1"}, seq: "429 200"},
		{name: "ra503", rules: []string{"retry_after=1.5;status=503;times=1"}, seq: "503 200"},
		{name: "radate", rules: []string{"retry_after=date+2s;times=1"}, seq: "429 200"},
		{name: "ratelimit", rules: []string{"rate_limit;times=1"}, seq: "429 200"},
		{name: "combo", rules: []string{"error_before=502;times=1", "drop_after;times=1"}, seq: "502 drop 200r"},
		{name: "exhaust", rules: []string{"error_before=503;times=3"}, seq: "503 503 503 200"},
		{name: "mix", rules: []string{"error_before=503;p=0.3", "error_after=502;p=0.15", "drop_after;p=0.15"}, n: 20 * suite.scale},
	}
	var rules []string
	var intents []intent
	classOf := map[string]*faultClass{}
	for ci := range classes {
		c := &classes[ci]
		if c.n == 0 {
			c.n = per
		}
		for _, r := range c.rules {
			rules = append(rules, r+";to=f-"+c.name+"-")
		}
		for i := range c.n {
			in := emailIntent(fmt.Sprintf("faults:%d:%s:%02d", suite.seed, c.name, i), fmt.Sprintf("f-%s-%02d@faults.test", c.name, i))
			intents = append(intents, in)
			classOf[in.Key] = c
		}
	}

	srv := newFake(t, "faults", mustFaults(t, rules...)...)
	dbURL, pool := newDatabase(t, pgtest.ServerURL(t), "faults")
	e := processEnv(dbURL, srv)
	model := retryModel{
		maxRetries:    2,
		rateLimitWait: 2 * time.Second,
		riverBase:     time.Second, // the worker's default RetryBase
		slack:         suite.slack,
	}
	w := startWorker(t, "worker", e, workerOptions{
		Concurrency: 20, JobTimeout: 15 * time.Second, RescueAfter: 20 * time.Second,
		APITimeout: time.Second, MaxRetries: model.maxRetries, RateLimitWait: model.rateLimitWait,
	})
	if !hasFlag(t, "work", "rate-limit-wait") {
		t.Logf("sendonce work has no --rate-limit-wait; the snooze after a bare 429 is the worker's default")
		model.rateLimitWait = 30 * time.Second
	}
	enqueueGo(t, pool, intents)
	waitAllSent(t, pool, len(intents), 2*time.Minute, nil)
	w.stop(t)

	l := checkExactlyOnce(t, srv, pool, intents)

	rows := outboxRows(t, pool)
	reqs := sendRequests(srv)
	var all gapStats
	for _, in := range intents {
		c := classOf[in.Key]
		rs := reqs[in.Key]
		if len(rs) == 0 {
			t.Errorf("%s: no request reached the API with its key", in.Key)
			continue
		}
		if c.seq != "" {
			if got := statusSeq(rs); got != c.seq {
				t.Errorf("%s (%s): the fake saw %q, want %q", in.Key, c.name, got, c.seq)
			}
		}
		st := model.check(rs)
		all.add(st)
		for _, p := range st.problems {
			t.Errorf("%s (%s): %s [requests: %s]", in.Key, c.name, p, describeRequests(rs))
		}
		row := rows[in.Key]
		if last := rs[len(rs)-1]; row.Replayed != last.Replayed {
			t.Errorf("%s (%s): outbox replayed=%v, but the API's final answer had replayed=%v", in.Key, c.name, row.Replayed, last.Replayed)
		}
		if want := 1 + st.riverRetries + st.snoozes; row.Attempts != want {
			t.Errorf("%s (%s): outbox counts %d attempts, the request log shows %d (River retries %d, snoozes %d) [requests: %s]",
				in.Key, c.name, row.Attempts, want, st.riverRetries, st.snoozes, describeRequests(rs))
		}
	}

	requests := 0
	for _, rs := range reqs {
		requests += len(rs)
	}
	summary(t, "faults: seed=%d intents=%d requests=%d deliveries=%d duplicates=%d lost=%d replayed=%d backoffs=%d retry_afters=%d snoozes=%d budget_resends=%d river_retries=%d max_overshoot=%s elapsed=%s",
		suite.seed, len(intents), requests, l.Deliveries, l.Duplicates, l.Lost, countReplayed(rows), all.backoffs, all.retryAfters,
		all.snoozes, all.budgetResends, all.riverRetries, all.maxOvershoot.Round(time.Millisecond), time.Since(start).Round(time.Second))
}

// retryModel is what the contract and the worker's flags say about the
// gap between two requests for one intent.
type retryModel struct {
	maxRetries    int           // the client's extra attempts within one call
	rateLimitWait time.Duration // the worker's snooze after a 429 without Retry-After
	riverBase     time.Duration // the worker's River retry base
	slack         time.Duration // scheduling slack allowed above a named wait
}

type gapStats struct {
	backoffs, retryAfters, snoozes, riverRetries, budgetResends int
	maxOvershoot                                                time.Duration
	problems                                                    []string
}

func (s *gapStats) add(o gapStats) {
	s.backoffs += o.backoffs
	s.retryAfters += o.retryAfters
	s.snoozes += o.snoozes
	s.budgetResends += o.budgetResends
	s.riverRetries += o.riverRetries
	s.maxOvershoot = max(s.maxOvershoot, o.maxOvershoot)
}

// check walks one intent's requests, in order, and says for each gap
// (from the fake's answer to the next request's arrival) which wait it
// must be, and whether it is.
//
// Within one call the client retries up to maxRetries times: after a
// network failure (a dropped connection, a timeout: the fake logs 499) or a
// 408/500/502/503/504 it backs off, retry n waiting in [cap/2, cap] with cap
// = min(0.5s·2^(n-1), 8s); after a Retry-After of up to a minute it waits
// exactly that. A 429 without Retry-After ends the call at once: the worker
// tells the fleet's budget and sends again when the budget hands it a
// token (a fleet signal) or when the intent's own backoff is over. A call that spent its retries ends too: River tries again
// after the worker's RetryBase·2^(attempt-1), less up to 10 %.
func (m retryModel) check(rs []fakeapi.RequestRecord) gapStats {
	var st gapStats
	retry, riverAttempt := 1, 1 // retry: the number the next in-call retry would have
	within := func(gap, lo, hi time.Duration, what string) {
		if gap < lo {
			st.problems = append(st.problems, fmt.Sprintf("%s: came after %s, sooner than %s", what, ms(gap), ms(lo)))
		}
		if hi > 0 && gap > hi+m.slack {
			st.problems = append(st.problems, fmt.Sprintf("%s: came after %s, later than %s (+%s slack)", what, ms(gap), ms(hi), ms(m.slack)))
		}
		if hi > 0 {
			st.maxOvershoot = max(st.maxOvershoot, gap-hi)
		}
	}
	for i := 1; i < len(rs); i++ {
		prev, cur := rs[i-1], rs[i]
		gap := cur.ReceivedAt.Sub(prev.AnsweredAt)
		what := fmt.Sprintf("request %d (after %s)", i+1, outcome(prev))
		if prev.IdempotencyKey != cur.IdempotencyKey {
			st.problems = append(st.problems, fmt.Sprintf("%s: key %q, the previous attempt's was %q", what, cur.IdempotencyKey, prev.IdempotencyKey))
		}
		switch {
		case prev.Status >= 200 && prev.Status < 300 && !prev.Dropped:
			st.problems = append(st.problems, what+": a request after a successful answer")

		case prev.RetryAfter != "":
			wait, until, ok := retryAfter(prev.RetryAfter, prev.AnsweredAt)
			switch {
			case !ok:
				st.problems = append(st.problems, fmt.Sprintf("%s: the fake sent an unreadable Retry-After %q", what, prev.RetryAfter))
			case wait > time.Minute || retry > m.maxRetries:
				// Not slept through within the call: the worker snoozes.
				st.snoozes++
				within(gap, wait, 0, what+" (snoozed for Retry-After)")
				retry = 1
			default:
				st.retryAfters++
				if !until.IsZero() {
					// An HTTP-date: the client waits whole seconds, until
					// the date or up to a second past it.
					if cur.ReceivedAt.Before(until) {
						st.problems = append(st.problems, fmt.Sprintf("%s: came at %s, before the Retry-After date %s", what,
							cur.ReceivedAt.Format("15:04:05.000"), until.Format("15:04:05.000")))
					}
					within(gap, 0, time.Duration(math.Ceil(wait.Seconds()))*time.Second, what+" (Retry-After date)")
				} else {
					within(gap, wait, wait, what+" (Retry-After "+prev.RetryAfter+")")
				}
				retry++
			}

		case prev.Status == http.StatusTooManyRequests:
			// No wait named: the client's call ends at once; the worker
			// tells the fleet's budget. A fleet signal slows every worker
			// down and the send goes again in the same attempt once the
			// budget gives it a token; any other 429 backs the intent off
			// on its own (a snooze, 1 s at first). Neither has a bound the
			// contract names.
			st.budgetResends++
			retry = 1

		case prev.Dropped || prev.Status == 499 || retryableStatus(prev.Status):
			if retry <= m.maxRetries {
				st.backoffs++
				c := backoffCap(retry)
				within(gap, c/2, c, fmt.Sprintf("%s (backoff, retry %d)", what, retry))
				retry++
			} else {
				st.riverRetries++
				base := m.riverBase << (riverAttempt - 1)
				within(gap, base-base/10, 0, fmt.Sprintf("%s (River retry of attempt %d)", what, riverAttempt))
				riverAttempt++
				retry = 1
			}

		default:
			st.problems = append(st.problems, what+": a retry after a status the contract never retries")
		}
	}
	return st
}

// backoffCap is the contract's cap for in-call retry n.
func backoffCap(n int) time.Duration {
	return min(500*time.Millisecond<<(n-1), 8*time.Second)
}

func retryableStatus(s int) bool {
	switch s {
	case 408, 500, 502, 503, 504:
		return true
	}
	return false
}

// retryAfter reads a Retry-After the fake sent: seconds, or an HTTP-date
// (then until is the date, and wait its distance from the answer).
func retryAfter(v string, answered time.Time) (wait time.Duration, until time.Time, ok bool) {
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(secs * float64(time.Second)), time.Time{}, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, time.Time{}, false
	}
	return t.Sub(answered), t, true
}

// statusSeq renders the fake's answers to one intent's requests.
func statusSeq(rs []fakeapi.RequestRecord) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = outcome(r)
	}
	return strings.Join(parts, " ")
}

func outcome(r fakeapi.RequestRecord) string {
	switch {
	case r.Dropped:
		return "drop"
	case r.Replayed:
		return fmt.Sprintf("%dr", r.Status)
	}
	return strconv.Itoa(r.Status)
}

func describeRequests(rs []fakeapi.RequestRecord) string {
	var parts []string
	for i, r := range rs {
		s := outcome(r)
		if r.RetryAfter != "" {
			s += " Retry-After=" + r.RetryAfter
		}
		if i > 0 {
			s = fmt.Sprintf("+%s %s", ms(r.ReceivedAt.Sub(rs[i-1].AnsweredAt)), s)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func countReplayed(rows map[string]outboxRow) int {
	n := 0
	for _, r := range rows {
		if r.Replayed {
			n++
		}
	}
	return n
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
