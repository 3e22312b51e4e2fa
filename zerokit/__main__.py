from zerokit.cli import run

run()
