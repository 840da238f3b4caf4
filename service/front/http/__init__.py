"""The HTTP/JSON way into the front: the JSON form of the gRPC contract (`/v1/...`),
LibreTranslate's API and a page for people, on the front's own event loop and through the
same calls as gRPC (service.front.servicer)."""
