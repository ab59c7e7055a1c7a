package api

import "encoding/base64"

func encodeRaw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
