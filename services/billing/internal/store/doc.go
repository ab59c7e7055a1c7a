// Package store holds all of billing's SQL: the projection of policy's members and builder
// flags (each applied event written with its stream position in one transaction), the seat
// cap, usage reports, and the seat count, which always goes through the seat_usage /
// seat_classes functions of the migrations so that shown, enforced and reported numbers come
// from one definition. Nothing else touches billing's tables.
package store
