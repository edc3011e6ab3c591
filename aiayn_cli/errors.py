"""One error type for user mistakes: printed as one line, exit code 2, no traceback."""


class AiaynError(Exception):
    """A problem with the user's input (a file, a line, an option) that the user can fix.

    The message is one line that names what is wrong and, where possible, what to do.
    The CLI prints it as ``error: <message>`` and exits with code 2.
    """

    exit_code = 2
    prefix = "error"


class Interrupted(AiaynError):
    """A run stopped by a signal after saving its state: printed as ``interrupted: <message>``,
    exit code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as the shell reports it."""

    prefix = "interrupted"

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number
