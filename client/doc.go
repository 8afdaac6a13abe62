/*
Package client is a Go client for the OpenEmail API, built so that an email
is sent once even when requests fail, time out or are retried.

It keeps the retry and idempotency contract of the official OpenEmail SDKs
call for call, so callers never write a retry loop of their own.

# Sending once

Every send (Emails.Send, Emails.SendBatch, Templates.Send, Broadcasts.Send)
carries an Idempotency-Key header. The API claims the key before it delivers
anything, so when a send is retried (after a timeout, a dropped connection or
a 5xx) the API replays the original message instead of sending a second one,
and answers with Replayed set.

The client makes a key for each call ("oe-" and a random UUID) and reuses it
for that call's retries. Two calls are two intents and get two keys. To stretch
the guarantee across processes (a job that crashed and ran again), pass a key
derived from the cause of the send, never from a clock:

	email, err := c.Emails.Send(ctx, &client.EmailParams{
		From:    "billing@example.com",
		To:      client.Recipients{"ada@example.com"},
		Subject: "Your invoice",
		Text:    "Invoice attached.",
	}, client.WithIdempotencyKey("invoice:inv_4192"))
	if err != nil {
		return err
	}
	if email.Replayed {
		// Sent earlier under this key; this is that email, as it is now.
	}

A key is 1 to 255 characters of letters, digits, '_', '.', ':' and '-'. A
caller's key is checked before anything is sent (see ValidateIdempotencyKey);
the same key with a different body is refused by the API with 422
idempotency_key_reuse (see IsIdempotencyKeyReuse).

A batch can succeed in part. Emails.SendBatch answers one item per email, in
order, and the API may refuse some emails while sending the rest: such an
item has Error set (an *ItemError) and no ID, and BatchResult.Failed counts
them. Sending a refused email again needs a new call, with a new key; the
batch's key replays the same answer, refusals included. A malformed email
refuses the whole batch instead: an *APIError whose Param names it
("emails[2].to") and nothing is sent.

# What is retried

Every GET is retried. A write is retried only when a second identical request
cannot mean anything other than the first: the sends (thanks to the key),
Emails.Cancel, Emails.Reschedule and Broadcasts.Cancel (each sets a named
state, and carries no key).

A repeatable call is retried, up to WithMaxRetries extra attempts (default
2), only after a network failure (timeouts included) or a 408, 500, 502, 503
or 504. A 429 is retried only when it carries Retry-After; every other status
fails at once. The wait before retry n is random in [cap/2, cap] with cap =
min(0.5s·2^(n-1), 8s), unless the server sent Retry-After (seconds or an
HTTP-date), which is waited exactly. A Retry-After over a minute stops the
call: the error carries the wait in APIError.RetryAfter.

WithTimeout bounds each attempt afresh (default 30s). The caller's context
bounds the whole call: when it is cancelled or expires, during a request or
during the wait before the next one, the call ends at once with a
*NetworkError and is never retried.

# Raw requests

Client.Do reaches any endpoint. A GET is retried; any other method is sent
once unless marked Repeatable, which a caller should do only for a call the
retry contract's table retries (contacts.update here: it sets named fields):

	var contact map[string]any
	err := c.Do(ctx, "PATCH", "/contacts/ct_123", map[string]any{"firstName": "Ada"}, &contact,
		client.Repeatable())

# Errors

A response outside 2xx is an *APIError (status, type, code, message, param,
request id, field errors, Retry-After). No response is a *NetworkError, with
Timeout. Helpers answer the usual questions: IsPermanent, IsRateLimited,
IsNotFound, IsTimeout, IsIdempotencyKeyReuse, IsInvalidIdempotencyKey.

	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Code == "template_archived" { ... }

# Configuration and credentials

New reads OPENEMAIL_API_KEY and OPENEMAIL_BASE_URL when WithAPIKey and
WithBaseURL are not given (an empty variable counts as unset). The key must
start oe_live_ or oe_test_. The base URL defaults to https://api.openemail.uk
(no /v1). The key is never sent over plain http except to a loopback host
(localhost, 127.0.0.0/8, ::1), so a local fake API works over http and a typo
cannot leak the key. The key never appears in an error, a log
line or a formatted Client.

# Params and JSON

EmailParams, TemplateSendParams and BroadcastParams encode the body the API
expects with encoding/json. A body already held as JSON, such as an outbox's
stored payload, is sent with the SendJSON methods (Emails.SendJSON,
Emails.SendBatchJSON, Templates.SendJSON, Broadcasts.SendJSON): as it is, but
for the contract's wire rules (a single-string to, cc or bcc becomes an array;
scheduledAt goes out in UTC with milliseconds), with the same key and retries
as the typed sends and the same bytes on every attempt.
*/
package client
