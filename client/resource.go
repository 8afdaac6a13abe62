package client

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// This file holds what the resource files (emails.go, templates.go,
// broadcasts.go) share, so each of them only names its calls.

// result runs r and decodes its answer into a new T.
func result[T any](ctx context.Context, c *Client, r *request) (*T, error) {
	var out T
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// onID makes a call on one object (collection/id+suffix) and decodes its
// answer into a new T.
func onID[T any](ctx context.Context, c *Client, call, method, collection, id, suffix string, body any) (*T, error) {
	path, err := idPath(collection, id, suffix)
	if err != nil {
		return nil, err
	}
	return result[T](ctx, c, &request{call: call, method: method, path: path, body: body})
}

// idPath is collection/id+suffix, with id escaped as one path segment. The
// empty id and all-dots ids are refused: they would name the collection or
// a parent instead.
func idPath(collection, id, suffix string) (string, error) {
	if strings.Trim(id, ".") == "" {
		return "", fmt.Errorf("%w: id is empty or only dots", ErrInvalidRequest)
	}
	return collection + "/" + url.PathEscape(id) + suffix, nil
}
