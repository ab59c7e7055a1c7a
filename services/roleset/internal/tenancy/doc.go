// Package tenancy decides who may connect to a data table as which roles. It holds the two
// questions the connection resolver asks: which enabled roles name this viewer as a tenant
// (ViewerRoles, for ?as=viewer, where being a workspace admin gives no reach and the admin
// role is never returned, because admin owns the tables and bypasses row-level security), and
// may this caller use this one role (CanUseRole, where admins may use every role). It also
// derives the deterministic name of a role-set login from catalog oids (a rename moves
// nothing), so every replica names the same set the same; its password is random and kept in
// the store. It is pure: identities come from policy, roles from the store.
package tenancy
