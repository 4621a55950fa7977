"""The lab's drills: a running `delivery: live` mesh changed, broken or failed over while traffic flows (`--drill
live|pmtu|ha`), judged per step."""
