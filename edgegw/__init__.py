"""edgegw: an edge inference gateway speaking the OpenAI API."""
