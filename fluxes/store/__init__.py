"""Redis I/O: key names, Lua scripts and the event store. Pure modules never import this."""
