package outbox

// KeyHash exposes keyHash to the tests of package outbox_test.
var KeyHash = keyHash
