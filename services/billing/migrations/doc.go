// Package migrations embeds billing's SQL migrations, numbered from 00002 (version 1 is the
// stream schema that pkg/migrate applies to every service). 00002 holds the one seat
// definition, seat_classes, that every shown, enforced and reported number is computed from.
package migrations
