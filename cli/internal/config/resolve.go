package config

import "fmt"

// Flags are the command line's values; an empty string is a flag not given.
type Flags struct {
	Context, PolicyAddr, RolesetAddr, BillingAddr, TokenFile, Workspace string
}

// Setting is one resolved value and where it came from: "flag", "env", "context NAME" or
// "default" ("" when there is no value), so that `context current` can say why.
type Setting struct {
	Value, Source string
}

// Resolved is what a command uses: every value after precedence. The token itself is read
// only when a call needs it (Token), so that commands without a call never touch the file.
type Resolved struct {
	Context                              string // the chosen context's name ("" for none)
	PolicyAddr, RolesetAddr, BillingAddr Setting
	Workspace                            Setting
	token                                Setting // the token's value, when it is given inline
	tokenFile                            Setting // the path of a file holding it
}

// Resolve applies the one precedence rule: flags, then the environment, then the chosen
// context (--context, else MILLWRIGHT_CONTEXT, else the file's current), then the defaults.
// A context that is named but not in the file is an error: a typo must not silently fall
// back to the local stack.
func Resolve(fl Flags, getenv func(string) string, f *File) (*Resolved, error) {
	name, from := fl.Context, "flag"
	if name == "" {
		name, from = getenv(EnvContext), "env"
	}
	if name == "" {
		name, from = f.Current, "config file"
	}
	var ctx Context
	if name != "" {
		c, ok := f.Find(name)
		if !ok {
			return nil, fmt.Errorf("no context %q (from the %s): see `millwright context list`", name, from)
		}
		ctx = c
	}
	pick := func(flag, env, inCtx, def string) Setting {
		switch {
		case flag != "":
			return Setting{flag, "flag"}
		case getenv(env) != "":
			return Setting{getenv(env), "env"}
		case inCtx != "":
			return Setting{inCtx, "context " + name}
		case def != "":
			return Setting{def, "default"}
		}
		return Setting{}
	}
	r := &Resolved{
		Context:     name,
		PolicyAddr:  pick(fl.PolicyAddr, EnvPolicyAddr, ctx.PolicyAddr, DefaultPolicyAddr),
		RolesetAddr: pick(fl.RolesetAddr, EnvRolesetAddr, ctx.RolesetAddr, DefaultRolesetAddr),
		BillingAddr: pick(fl.BillingAddr, EnvBillingAddr, ctx.BillingAddr, DefaultBillingAddr),
		Workspace:   pick(fl.Workspace, EnvWorkspace, ctx.Workspace, ""),
	}
	// One token source wins as a whole, in the same order: a file named by a flag, a token
	// or a file in the environment, a token or a file in the context.
	switch {
	case fl.TokenFile != "":
		r.tokenFile = Setting{fl.TokenFile, "flag"}
	case getenv(EnvToken) != "":
		r.token = Setting{getenv(EnvToken), "env"}
	case getenv(EnvTokenFile) != "":
		r.tokenFile = Setting{getenv(EnvTokenFile), "env"}
	case ctx.Token != "":
		r.token = Setting{ctx.Token, "context " + name}
	case ctx.TokenFile != "":
		r.tokenFile = Setting{ctx.TokenFile, "context " + name}
	}
	return r, nil
}

// Token returns the bearer token ("" when none is configured), reading a token file now.
func (r *Resolved) Token() (string, error) {
	if r.tokenFile.Value != "" {
		return ReadTokenFile(r.tokenFile.Value)
	}
	return r.token.Value, nil
}

// TokenSource describes the token without revealing it: "set (env)", "file PATH (flag)",
// or "unset".
func (r *Resolved) TokenSource() string {
	switch {
	case r.tokenFile.Value != "":
		return fmt.Sprintf("file %s (%s)", r.tokenFile.Value, r.tokenFile.Source)
	case r.token.Value != "":
		return fmt.Sprintf("set (%s)", r.token.Source)
	}
	return "unset"
}
