"""shipagent's tests, one folder per layer; ``support`` holds the helpers they import by absolute name."""
