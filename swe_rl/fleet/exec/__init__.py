"""The exec server: one per Docker node, owner of that node's task containers (entry point: `app.main`)."""
