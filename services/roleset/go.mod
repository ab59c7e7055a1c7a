module github.com/millwright/millwright/services/roleset

go 1.26.0

require github.com/millwright/millwright/pkg v0.0.0

replace github.com/millwright/millwright/pkg => ../../pkg
