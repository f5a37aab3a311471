# placeholder: owned by the area's author
