// placeholder: replaced by the client module
