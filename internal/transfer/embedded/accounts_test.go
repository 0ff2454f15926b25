package embedded_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// The tenants file is checked whole before anything starts; each problem names its entry and never
// quotes a password.
func TestTenants_Parse(t *testing.T) {
	good := `{"admins":[{"user":"ops","password":"p"}],"tenants":[{"namespace":"alice","user":"alice","password":"pw-alice"}]}`
	tn, err := embedded.ParseTenants([]byte(good), "t.json")
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, tn.Namespaces())

	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	for _, c := range []struct{ name, file, want string }{
		{"not JSON", `{"admins": [`, "t.json: not a tenants file"},
		{"syntax error inside a password", `{"tenants":[{"namespace":"a","user":"a","password":"se"cret"}]}`, "JSON syntax error at byte"},
		{"unknown field", `{"tenants":[{"namespace":"a","user":"a","pasword":"x"}]}`, `unknown field "pasword"`},
		{"trailing data", good + `{}`, "unexpected data after the JSON object"},
		{"empty", `{}`, "no admins and no tenants"},
		{"no namespace", `{"tenants":[{"user":"a","password":"x"}]}`, "tenants[0]: namespace: invalid id: empty"},
		{"no credentials", `{"tenants":[{"namespace":"a"}]}`, `tenants[0] (namespace "a"): needs user and password, or nkey`},
		{"no password", `{"tenants":[{"namespace":"a","user":"a"}]}`, "user a: password missing"},
		{"no user", `{"admins":[{"password":"hunter2"}]}`, "admins[0]: user: missing"},
		{"both", `{"tenants":[{"namespace":"a","user":"a","password":"x","nkey":"` + pub + `"}]}`, "not both"},
		{"seed instead of public key", `{"tenants":[{"namespace":"a","nkey":"` + string(seed) + `"}]}`, "not a user's public nkey"},
		{"daemon's user", `{"admins":[{"user":"checkpointd","password":"x"}]}`, "reserved for the daemon"},
		{"user twice", `{"tenants":[{"namespace":"a","user":"u","password":"x"},{"namespace":"b","user":"u","password":"y"}]}`,
			`tenants[1] (namespace "b"): user u is also used by tenants[0] (namespace "a")`},
		{"nkey twice", `{"admins":[{"nkey":"` + pub + `"}],"tenants":[{"namespace":"b","nkey":"` + pub + `"}]}`, "nkey is also used by admins[0]"},
		{"namespace too long", `{"tenants":[{"namespace":"` + strings.Repeat("n", 300) + `","user":"u","password":"x"}]}`, "tenants[0]: namespace: invalid id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := embedded.ParseTenants([]byte(c.file), "t.json")
			var fe *embedded.TenantsFileError
			require.ErrorAs(t, err, &fe)
			require.Contains(t, err.Error(), c.want)
			for _, secret := range []string{"hunter2", "cret", string(seed)} {
				require.NotContains(t, err.Error(), secret)
			}
		})
	}
	_, err = embedded.LoadTenants(filepath.Join(t.TempDir(), "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
