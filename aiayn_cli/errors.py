"""One error type for user mistakes: printed as one line, exit code 2, no traceback."""

from __future__ import annotations

from collections.abc import Callable


class AiaynError(ValueError):
    """A problem with the user's input (a file, a line, an option) that the user can fix.

    The message is one line that names what is wrong and, where possible, what to do. The library
    speaks of its own keys, never of command-line flags: an error about one option or recipe key
    carries it as `key` (the library's name: `device`, `data_dir`, `on_long`), and its message says
    what is wrong with it. Each front end names the key its own way (`render`): the CLI as the flag
    of the running command (`--data-dir`), once, in `aiayn_cli.cli.app`; `str()` as the key itself.
    The CLI prints ``error: <message>`` and exits with code 2.
    """

    exit_code = 2
    prefix = "error"

    def __init__(self, message: str, *, key: str | None = None, mentions: tuple[str, ...] = ()):
        super().__init__(message)
        self.message, self.key, self.mentions = message, key, mentions

    def render(self, name: Callable[[str], str] = str) -> str:
        """The line, with the key (if any) named by `name(key)` in front of the message, and the other
        keys it mentions (`{data_dir}` placeholders, listed in `mentions`) named the same way."""
        message = self.message
        for key in self.mentions:  # only these placeholders: a path in the message may hold braces too
            message = message.replace("{" + key + "}", name(key))
        return f"{name(self.key)} {message}" if self.key else message

    def __str__(self) -> str:
        return self.render()


class Interrupted(AiaynError):
    """A run stopped by a signal after saving its state: printed as ``interrupted: <message>``,
    exit code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as the shell reports it."""

    prefix = "interrupted"

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number


class LostProcess(AiaynError):
    """A run of several processes that lost one of them (killed, hung, its machine gone): printed as
    ``error: <message>`` (which says how to resume), exit code 1."""

    exit_code = 1


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name where it has none): what a library's
    multi-line error contributes to one `AiaynError` line."""
    lines = str(err).strip().splitlines()
    return lines[0].strip() if lines else type(err).__name__
