"""The lab's gateway machines: a namespace running the lab's interpreter, or a systemd-nspawn container booted from
the lab's Debian image with its user data as the NoCloud seed; and the build that plugs them into the fabric."""
