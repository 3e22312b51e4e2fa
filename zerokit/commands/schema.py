"""`zerokit schema`: print the JSON Schema of a DeepSpeed config (for editors and CI); exit 0."""

from __future__ import annotations

import click


@click.command("schema", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> int:
    """Print the JSON Schema (draft 2020-12) of a DeepSpeed 0.19 ds_config.

    \b
    Save it and point your editor at it, e.g. in VS Code settings.json:
      "json.schemas": [{"fileMatch": ["*ds_config*.json"], "url": "./ds_config.schema.json"}]
    """
    from zerokit.lint.schema import schema_text

    click.echo(schema_text(), nl=False)
    return 0
