"""What the repository promises as a whole: the docs site, the README, docs hygiene, the wheel."""
