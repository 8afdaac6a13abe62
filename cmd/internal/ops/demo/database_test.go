package demo

import (
	"strings"
	"testing"
)

func TestDescribeURLHidesThePassword(t *testing.T) {
	for _, url := range []string{
		"postgres://app:s3cret@db.example:5433/shop?sslmode=disable",
		"host=db.example port=5433 user=app password=s3cret dbname=shop",
	} {
		got, err := describeURL(url)
		if err != nil {
			t.Fatal(err)
		}
		if got != "app@db.example:5433/shop" {
			t.Errorf("describeURL(%q) = %q, want app@db.example:5433/shop", url, got)
		}
	}
	if _, err := describeURL("postgres://app:s3cret@db.example:notaport/shop"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a bad URL: err = %v, want an error without the password", err)
	}
}
