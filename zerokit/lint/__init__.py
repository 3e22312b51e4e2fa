"""`zerokit lint`: schema and semantic checks of DeepSpeed configs, without torch or deepspeed.

    from zerokit.lint.engine import Context, lint_paths
    result = lint_paths(["ds_config.json"], Context(target="trainer", world_size=8))
    for f in result.findings:          # zerokit.lint.findings.Finding
        print(f.path, f.line, f.column, f.severity, f.code, f.key, f.message, f.suggestion)
    result.exit_code(strict=False)     # 0 clean, 1 errors, 2 unreadable input

Modules: loader (JSON/HJSON/YAML with key positions), schema (the shipped JSON Schema and its checks),
rules (the ordered rule table), accelerate (Accelerate YAML), engine (files -> findings), render (text/json/github).
`schema_gen` regenerates data/ds_config.schema.json from the installed DeepSpeed; it is the only module here
that imports deepspeed, and nothing on the lint path imports it.
"""
