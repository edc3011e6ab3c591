"""One error type for user mistakes: printed as one line, exit code 2, no traceback."""


class AiaynError(Exception):
    """A problem with the user's input (a file, a line, an option) that the user can fix.

    The message is one line that names what is wrong and, where possible, what to do.
    The CLI prints it as ``error: <message>`` and exits with code 2.
    """

    exit_code = 2


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name where it has none): what a library's
    multi-line error contributes to one `AiaynError` line."""
    lines = str(err).strip().splitlines()
    return lines[0].strip() if lines else type(err).__name__
