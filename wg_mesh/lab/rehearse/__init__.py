"""A change rehearsed as `pulumi up` runs it (`wg-mesh lab --before BEFORE --file AFTER`): run.py."""
