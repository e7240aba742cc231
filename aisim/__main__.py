from aisim.cli import main

main()
