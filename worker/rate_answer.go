package worker

import (
	"context"
	"errors"
	"time"

	"github.com/sendonce/sendonce/client"
	"github.com/sendonce/sendonce/internal/base/budget"
)

// answering wraps a send's call so the fleet's budget hears every answer:
// its rate-limit headers (to pace before a 429 rather than after) and
// whether it says a quota is exhausted (which pauses the fleet until the
// quota resets, rather than cutting its rate).
func (a *attempt) answering(ctx context.Context, call func() (sendResult, error)) func() (sendResult, error) {
	b := a.w.budget
	if b == nil {
		return call
	}
	return func() (sendResult, error) {
		res, err := call()
		if ctx.Err() == nil {
			if berr := b.Answered(ctx, answerOf(res, err)); berr != nil {
				a.log.Warn("cannot tell the fleet's budget of the API's answer", "error", berr)
			}
		}
		return res, err
	}
}

// answerOf is what the budget needs of one answer.
func answerOf(res sendResult, err error) budget.Answer {
	var ans budget.Answer
	rate := res.rate
	var apiErr *client.APIError
	switch {
	case err == nil:
		ans.Status = 200
	case errors.As(err, &apiErr):
		ans.Status, rate = apiErr.Status, apiErr.RateLimit
	default:
		return ans // no answer: a network error, a refusal before sending
	}
	if rate != nil {
		ans.Limit, ans.Window = rate.Limit, rate.Window
		ans.Remaining, ans.HasRemaining, ans.Reset = rate.Remaining, rate.HasRemaining, rate.Reset
		if rate.Window >= Day {
			// A quota's policy, not a rate: it does not pace; nothing
			// remaining of it is the quota exhausted.
			ans.Limit, ans.Window, ans.HasRemaining = 0, 0, false
			if rate.HasRemaining && rate.Remaining == 0 {
				ans.Quota, ans.QuotaReset = quotaPeriod(rate.Window >= 28*Day), rate.Reset
			}
		}
	}
	if per, ok := client.QuotaExhausted(err); ok {
		ans.Quota = quotaPeriod(per == "month")
		switch {
		case apiErr.RetryAfter > 0:
			ans.QuotaReset = apiErr.RetryAfter
		case rate != nil && rate.Reset > time.Minute:
			ans.QuotaReset = rate.Reset
		}
	}
	return ans
}

func quotaPeriod(month bool) budget.Period {
	if month {
		return budget.PerMonth
	}
	return budget.PerDay
}
