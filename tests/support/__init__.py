"""What the tests share: pipelines of real role processes, waiting, fault injection, servers."""
