package client

import (
	"strings"
	"unicode"
)

// repeatableCalls is the retry contract's table of write calls, call for
// call (retry-contract.md §2, with its footnoted calls and the "newer calls"
// paragraph). A call maps to true when a second identical request cannot mean
// anything other than the first, so the client may retry it; false when a
// retry could do the work twice or report success as failure.
//
// Reads (GET) are not listed: every GET is retried. Writes not listed are not
// retried ("every other call that is not a GET: no").
//
// The test TestRepeatableCallsMatchContract holds this map against a verbatim
// copy of the contract's rows in testdata/; change both together.
var repeatableCalls = map[string]bool{
	// The idempotency key turns a repeat into a replay.
	"emails.send":       true,
	"emails.send_batch": true,
	"templates.send":    true,
	"broadcasts.send":   true,

	// Sets a named state.
	"emails.cancel":              true,
	"emails.reschedule":          true,
	"broadcasts.cancel":          true,
	"forms.publish":              true, // Ruby lists it with templates.publish; retried either way.
	"forms.pause":                true,
	"forms.resume":               true,
	"forms.approve_submission":   true,
	"threads.restore":            true,
	"account.accept_invitation":  true,
	"account.decline_invitation": true,

	// Sets labels; twice is the same as once.
	"threads.update": true,
	"threads.trash":  true,

	// The wake time is in the body, not derived from arrival.
	"threads.snooze":   true,
	"threads.unsnooze": true,

	// Sets named fields.
	"emails.update":                  true,
	"labels.update":                  true,
	"webhooks.update":                true,
	"settings.update":                true,
	"roles.update":                   true,
	"members.update":                 true,
	"domains.update":                 true,
	"domains.update_address":         true,
	"domains.update_address_forward": true,
	"contacts.update":                true,
	"audiences.update":               true,
	"keys.update":                    true,
	// A forms.update carrying expectedUpdatedAt can come back 409
	// version_conflict after a lost response: the first attempt went through.
	"forms.update":                   true,
	"branding.update":                true,
	"threads.update_note":            true,
	"chats.rename":                   true,
	"account.set_email_notification": true,
	"account.set_push_muted":         true,
	"app_host.set":                   true,
	"workspaces.set_active":          true,

	// A grant is an upsert; an order is given whole.
	"members.grant_address": true,
	"members.grant_domain":  true,
	"rules.reorder":         true,
	"threads.reorder_notes": true,

	// Publishing the published head, or starting a started import, returns it.
	"templates.publish": true,
	"imports.start":     true,

	// Renders, counts or evaluates; writes nothing.
	"templates.preview":  true,
	"templates.render":   true,
	"broadcasts.preview": true,
	"rules.test":         true,

	// A repeated check changes only the time it was checked.
	"domains.verify":   true,
	"app_host.verify":  true,
	"senders.research": true, // Python lists it with the "already done" group; retried either way.

	// Each names the end state.
	"contacts.save":                   true,
	"contacts.set_audiences":          true,
	"contacts.remove_photo":           true,
	"contacts.block":                  true,
	"contacts.unblock":                true,
	"contacts.delete_many":            true,
	"keys.revoke":                     true,
	"files.revoke_link":               true,
	"files.revoke_all_links":          true,
	"app_host.delete":                 true,
	"account.remove_photo":            true,
	"branding.remove_image":           true,
	"domains.remove_logo":             true,
	"domains.remove_logo_certificate": true,
	"domains.remove_address_photo":    true,
	"subscriptions.move":              true,

	// A repeat finds the first call's work done and reports it.
	"audiences.add_contact":     true,
	"audiences.add_contacts":    true,
	"audiences.remove_contacts": true,
	"audiences.import_contacts": true,
	"suppressions.add":          true,
	"domains.create_address":    true,

	// Resent bytes replace what the first attempt stored.
	"contacts.set_photo":           true,
	"account.set_photo":            true,
	"branding.upload_image":        true,
	"domains.set_logo":             true,
	"domains.set_logo_certificate": true,
	"domains.set_address_photo":    true,
	"imports.upload_chunk":         true,

	// Newer calls (PHP SDK 0.0.2): each sets named fields or repeats a
	// read-only query.
	"contacts.update_card":             true,
	"domains.update_mail_app_settings": true,
	"domains.update_app_password":      true,
	"knowledge.search":                 true,
	"knowledge.update":                 true,
	"knowledge.refresh":                true,
	"knowledge.dismiss_flag":           true,
	"knowledge.update_connector":       true,
	"knowledge.sync_connector":         true,

	// Not retried: a retry leaves two objects.
	"drafts.create":    false,
	"labels.create":    false,
	"webhooks.create":  false,
	"templates.create": false,
	"rules.create":     false,
	"roles.create":     false,
	"temp_mail.create": false,
	"files.upload":     false,
	"templates.design": false,
	"forms.design":     false,

	// Not retried: read the id from each write's result instead of reusing
	// the one you sent.
	"drafts.update": false,

	// Not retried: a retry after a lost response reports failure for work
	// that succeeded.
	"drafts.delete":            false,
	"labels.delete":            false,
	"webhooks.delete":          false,
	"templates.delete":         false,
	"rules.delete":             false,
	"roles.delete":             false,
	"members.remove":           false,
	"members.revoke_address":   false,
	"temp_mail.delete":         false,
	"temp_mail.delete_message": false,

	// Not retried: a second rotation voids the secret the first returned.
	"webhooks.rotate_secret": false,
	// Not retried: it would send a second test delivery.
	"webhooks.test": false,
	// Not retried: it would send the event to the receiver again.
	"webhooks.replay_delivery": false,

	// Not retried: each spends a model call; a retry buys the answer twice.
	"emails.translate":       false,
	"emails.compose":         false,
	"emails.rewrite":         false,
	"emails.suggest_subject": false,

	// Not retried: a retry could send a second email or spend a second code
	// attempt.
	"security.begin_step_up":  false,
	"security.verify_step_up": false,
}

// IsRepeatable reports how the retry contract classifies a write call, named
// as in the contract ("contacts.update") or as the PHP and TypeScript SDKs
// name it ("contacts.updateCard", "tempMail.create"). known is false for a
// call the contract does not name; such a call is not repeatable, as the
// contract's "every other call that is not a GET" row says. Reads (GET) are
// always retried and are not looked up here.
func IsRepeatable(call string) (repeatable, known bool) {
	repeatable, known = repeatableCalls[normaliseCallName(call)]
	return repeatable, known
}

// normaliseCallName turns the camelCase names of the PHP and TypeScript SDKs
// (tempMail.deleteMessage) into the contract's snake_case
// (temp_mail.delete_message).
func normaliseCallName(call string) string {
	var b strings.Builder
	b.Grow(len(call) + 4)
	for i, r := range call {
		if unicode.IsUpper(r) {
			if i > 0 && call[i-1] != '.' && call[i-1] != '_' {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
