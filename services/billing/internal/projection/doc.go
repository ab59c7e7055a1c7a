// Package projection keeps billing's copy of policy's members and builder flags current: it
// follows policy's Watch stream from the last position stored in billing's database, applies
// each event together with its position in one transaction (so a restart or a killed stream
// neither skips nor repeats an event), rebuilds from policy's snapshot when told to resync,
// and lets seat checks wait until it has applied the position policy asks them to be at
// least as fresh as.
package projection
