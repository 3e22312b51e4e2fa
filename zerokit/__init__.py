"""zerokit: plan, lint and launch DeepSpeed ZeRO training.

The planner (`zerokit.planner`) and the linter (`zerokit.lint`) import neither torch nor deepspeed,
so `pip install zerokit` is enough for CI. `pip install zerokit[deepspeed]` adds launch and preflight.
"""

__version__ = "0.1.0"
