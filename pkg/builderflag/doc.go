// Package builderflag is the one definition of "builder rights are on" for a workspace, shared
// by policy (which decides with it) and billing (which prices with it); policy's schema holds the
// same rule as the SQL function operator_builder_on (migration 00006), which the guard trigger
// and the stream payload use, and a test runs Examples through both.
//
// Builder rights are on exactly when the stored operator_settings object has the member
// "builder" (this spelling, case-sensitive) holding the JSON literal true. Nothing else grants
// them: not a string "true", not 1, and not the names the right had in earlier platform
// versions (builder_flows, builder_apps, operator_builder_enabled). Those names, and any other
// key that spells "builder" in any ASCII case except the two known keys, are refused on write by
// the schema (operator_settings_refused_key), so that no reader can be tempted to count them.
package builderflag
