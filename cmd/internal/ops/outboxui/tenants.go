package outboxui

import (
	"context"
	"fmt"

	"github.com/sendonce/sendonce/internal/ops/tenants"
)

// tenantsPanel is the overview's tenants (issue 46), the figures of
// `sendonce tenants`: each tenant's weight, limits and their use, backlog,
// share of the fleet's claims in the last minute, and what holds it back.
type tenantsPanel struct {
	Tenants []tenants.Tenant
	// More says more tenants follow those shown.
	More bool
	// Note says what the shares are of.
	Note string
}

// panelTenants is the most tenants the overview lists; sendonce tenants
// lists them all.
const panelTenants = 20

// readTenants reads the tenants panel, or nil when there is nothing but
// the default tenant to show (no settings, no other tenant's intents
// pending): a sender for one customer sees the page as it was.
func (h *Handler) readTenants(ctx context.Context) (*tenantsPanel, error) {
	used, err := tenants.InUse(ctx, h.pool)
	if err != nil || !used {
		return nil, err
	}
	l, err := tenants.Read(ctx, h.pool, nil, panelTenants)
	if err != nil {
		return nil, fmt.Errorf("outboxui: %w", err)
	}
	return &tenantsPanel{Tenants: l.Tenants, More: l.Next != "", Note: tenants.ShareNote(l.Claims)}, nil
}
