"""The `aiayn` command line: `app` registers the commands, `commands/` holds one thin typed function
per command, `options` the option aliases they share. Only this layer speaks of flags."""

from .app import app, main, script

__all__ = ["app", "main", "script"]
