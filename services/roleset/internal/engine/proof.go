package engine

import (
	"strconv"
	"strings"

	"github.com/millwright/millwright/services/roleset/internal/secret"
	"github.com/millwright/millwright/services/roleset/internal/target"
)

// proof is the ownership proof of one role we make on a target cluster, written as its comment:
// "<prefix><key id>:<MAC>", the MAC (secret.Keyring.Prove) taken over the prefix, which names
// this instance and the role (a catalog role by its id, which a rename keeps; a set login by its
// name, never renamed), and the role's oid. The oid is what a planter cannot reuse: a comment
// copied from one of our roles to a role the planter made does not verify there.
type proof struct {
	keys   *secret.Keyring
	prefix string
	// legacy, when set, is also accepted: the plain marker written before proofs existed. Only
	// for a ready catalog role found by the oid our catalog recorded when we created it (that
	// record is the proof there), never when adopting a role found by name.
	legacy string
}

func (p proof) msg(oid int64) string { return p.prefix + "\x00" + strconv.FormatInt(oid, 10) }

func (p proof) Comment(oid int64) string { return p.prefix + p.keys.Prove(p.msg(oid)) }

func (p proof) Verify(comment string, oid int64) bool {
	if p.legacy != "" && comment == p.legacy {
		return true
	}
	mac, ok := strings.CutPrefix(comment, p.prefix)
	return ok && p.keys.VerifyProof(p.msg(oid), mac)
}

// roleProof is catalog role id's proof.
func (e *Engine) roleProof(id int64) proof {
	return proof{keys: e.cfg.Keys, prefix: target.CommentPrefix + e.cfg.InstanceID + " role " + strconv.FormatInt(id, 10) + " proof "}
}

// catalogRoleProof is roleProof that also accepts the legacy marker, for a role found by the
// oid of a ready catalog row.
func (e *Engine) catalogRoleProof(id int64) proof {
	p := e.roleProof(id)
	p.legacy = target.CommentPrefix + e.cfg.InstanceID + " role " + strconv.FormatInt(id, 10)
	return p
}

// LoginProof is set login's proof (exported for the tests that stage a crash window).
func (e *Engine) LoginProof(login string) target.Proof {
	return proof{keys: e.cfg.Keys, prefix: target.CommentPrefix + e.cfg.InstanceID + " login " + login + " proof "}
}

// RoleProof is catalog role id's proof (exported for tests).
func (e *Engine) RoleProof(id int64) target.Proof { return e.roleProof(id) }
