package p

const (
	a = `SELECT id FROM sendonce_outbox WHERE state = 'pending'`
	b = "sendonce_drain"
	c = `SELECT pg_notify('sendonce_wake', '')`
	d = "river_job"
)

var e = "%d intents in sendonce_outbox, each with its River job."
